import type { Command } from "../command.ts";
import { setDesiredState } from "../desired-state.ts";

const USAGE = "wake SESSION [-n NAMESPACE] [--no-wait] [--timeout 10m]";

/** `wake`: desiredState running on a paused HarnessSession; waits until it is Ready again. */
export const wake: Command = {
  name: "wake",
  usage: USAGE,
  summary: "wake a paused HarnessSession (desiredState running)",
  run: (argv) => setDesiredState(argv, USAGE, "running", "wake"),
};
