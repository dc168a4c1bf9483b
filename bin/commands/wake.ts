import type { Command } from "../command.ts";
import { setDesiredState } from "../desired-state.ts";

const USAGE = "wake SESSION [-n NAMESPACE] [--no-wait] [--timeout 10m]";

/** `wake`: desiredState running on a paused HarnessSession; waits until it is Ready again. */
export const wake: Command = {
  name: "wake",
  usage: USAGE,
  summary: "wake a paused HarnessSession (desiredState running)",
  flags: [
    ["--no-wait", "return once the change is accepted, without waiting for the phase"],
    ["--timeout DURATION", "how long to wait (default 10m); the work goes on server-side after it"],
  ],
  examples: ["agent-sessions wake coding"],
  run: (argv) => setDesiredState(argv, USAGE, "running", "wake"),
};
