import { contextFrom } from "../cli-context.ts";
import { type Command, parseCommand, positionals } from "../command.ts";
import { waitForPhase } from "../wait.ts";

const USAGE = "fork SNAPSHOT NEW-SESSION [-n NAMESPACE] [--no-wait] [--timeout 10m]";

/**
 * `fork`: a new HarnessSession from a snapshot (`spec.source.snapshotRef`): the snapshot's Agent
 * and runtime, its files, and an agent that recalls its conversation; independent from then on.
 * Waits until it is Ready unless --no-wait.
 */
export const fork: Command = {
  name: "fork",
  usage: USAGE,
  summary: "create a session from a snapshot: its files and conversation, then on its own",
  flags: [
    ["--no-wait", "return once the change is accepted, without waiting for the phase"],
    ["--timeout DURATION", "how long to wait (default 10m); the work goes on server-side after it"],
  ],
  examples: ["agent-sessions fork before-refactor try-2"],
  async run(argv) {
    const parsed = parseCommand(argv, USAGE, {
      "no-wait": { type: "boolean", default: false },
      timeout: { type: "string", default: "10m" },
    });
    const [snapshot = "", session = ""] = positionals(parsed.positionals, ["SNAPSHOT", "NEW-SESSION"], USAGE);
    const ctx = contextFrom(parsed.values);
    let made = await ctx.client.fork(ctx.namespace, snapshot, session);
    if (!parsed.values["no-wait"])
      made = await waitForPhase(ctx, ctx.namespace, session, "Ready", parsed.values.timeout);
    if (ctx.json) ctx.out(JSON.stringify(made));
    else if (!ctx.quiet)
      ctx.out(
        `harnesssession/${session} forked from sessionsnapshot/${snapshot} (phase ${made.status.phase})`,
      );
    return 0;
  },
};
