import type { Command } from "../command.ts";
import { setDesiredState } from "../desired-state.ts";

const USAGE = "stop SESSION [-n NAMESPACE] [--no-wait] [--timeout 10m]   (scale to 0; the volume stays)";

/** `stop`: desiredState stopped on a HarnessSession; waits until it is Stopped. */
export const stop: Command = {
  name: "stop",
  usage: USAGE,
  summary: "stop a HarnessSession (its volume stays)",
  flags: [
    ["--no-wait", "return once the change is accepted, without waiting for the phase"],
    ["--timeout DURATION", "how long to wait (default 10m); the work goes on server-side after it"],
  ],
  examples: ["agent-sessions stop coding", "agent-sessions stop coding --no-wait"],
  run: (argv) => setDesiredState(argv, USAGE, "stopped"),
};
