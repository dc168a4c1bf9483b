import type { Command } from "../command.ts";
import { setDesiredState } from "../desired-state.ts";

const USAGE = "resume SESSION [-n NAMESPACE] [--no-wait] [--timeout 10m]";

/** `resume`: desiredState running on a HarnessSession; waits until it is Ready again. */
export const resume: Command = {
  name: "resume",
  usage: USAGE,
  summary: "resume a stopped (or idle-stopped, or failed) HarnessSession",
  run: (argv) => setDesiredState(argv, USAGE, "running"),
};
