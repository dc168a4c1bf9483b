import type { Command } from "../command.ts";
import { setDesiredState } from "../desired-state.ts";

const USAGE =
  "pause SESSION [-n NAMESPACE] [--no-wait] [--timeout 10m]   (frozen with its memory; a request wakes it; Docker only)";

/** `pause`: desiredState paused on a HarnessSession (the paused tier); waits until it is Paused. */
export const pause: Command = {
  name: "pause",
  usage: USAGE,
  summary: "pause a HarnessSession: its workload frozen with all its memory (Docker runners)",
  flags: [
    ["--no-wait", "return once the change is accepted, without waiting for the phase"],
    ["--timeout DURATION", "how long to wait (default 10m); the work goes on server-side after it"],
  ],
  examples: ["agent-sessions pause coding", "agent-sessions wake coding"],
  run: (argv) => setDesiredState(argv, USAGE, "paused", "pause"),
};
