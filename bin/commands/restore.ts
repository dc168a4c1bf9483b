import { contextFrom } from "../cli-context.ts";
import { type Command, parseCommand, positionals } from "../command.ts";
import { waitForPhase } from "../wait.ts";

const USAGE =
  "restore SESSION SNAPSHOT [-n NAMESPACE] [--no-wait] [--timeout 10m]   (what came after the snapshot is gone)";

/**
 * `restore`: a HarnessSession's volume back to one of its snapshots (`POST …:restore`): stopped,
 * restored, brought back to its desired state. Waits until it is there unless --no-wait.
 */
export const restore: Command = {
  name: "restore",
  usage: USAGE,
  summary: "roll a session back to a snapshot: its files and conversation as they were",
  flags: [
    ["--no-wait", "return once the change is accepted, without waiting for the phase"],
    ["--timeout DURATION", "how long to wait (default 10m); the work goes on server-side after it"],
  ],
  examples: ["agent-sessions restore coding before-refactor"],
  async run(argv) {
    const parsed = parseCommand(argv, USAGE, {
      "no-wait": { type: "boolean", default: false },
      timeout: { type: "string", default: "10m" },
    });
    const [session = "", snapshot = ""] = positionals(parsed.positionals, ["SESSION", "SNAPSHOT"], USAGE);
    const ctx = contextFrom(parsed.values);
    let restored = (await ctx.client.restore(ctx.namespace, session, snapshot)).session;
    const target = { running: "Ready", paused: "Paused", stopped: "Stopped" } as const;
    if (!parsed.values["no-wait"])
      restored = await waitForPhase(
        ctx,
        ctx.namespace,
        session,
        target[restored.spec.desiredState],
        parsed.values.timeout,
      );
    if (ctx.json) ctx.out(JSON.stringify(restored));
    else if (!ctx.quiet)
      ctx.out(
        `harnesssession/${session} restored to sessionsnapshot/${snapshot} (phase ${restored.status.phase})`,
      );
    return 0;
  },
};
