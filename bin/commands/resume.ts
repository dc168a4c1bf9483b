import type { Command } from "../command.ts";
import { setDesiredState } from "../desired-state.ts";

const USAGE = "resume SESSION [-n NAMESPACE] [--no-wait] [--timeout 10m]";

/** `resume`: desiredState running on a HarnessSession; waits until it is Ready again. */
export const resume: Command = {
  name: "resume",
  usage: USAGE,
  summary: "resume a stopped (or idle-stopped, or failed) HarnessSession",
  flags: [
    ["--no-wait", "return once the change is accepted, without waiting for the phase"],
    ["--timeout DURATION", "how long to wait (default 10m); the work goes on server-side after it"],
  ],
  examples: ["agent-sessions resume coding", "agent-sessions resume coding --no-wait"],
  run: (argv) => setDesiredState(argv, USAGE, "running"),
};
