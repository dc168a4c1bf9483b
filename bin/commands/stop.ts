import type { Command } from "../command.ts";
import { setDesiredState } from "../desired-state.ts";

const USAGE = "stop SESSION [-n NAMESPACE] [--no-wait] [--timeout 10m]   (scale to 0; the volume stays)";

/** `stop`: desiredState stopped on a HarnessSession; waits until it is Stopped. */
export const stop: Command = {
  name: "stop",
  usage: USAGE,
  summary: "stop a HarnessSession (its volume stays)",
  run: (argv) => setDesiredState(argv, USAGE, "stopped"),
};
