import { contextFrom } from "../cli-context.ts";
import { type Command, parseCommand, positionals } from "../command.ts";
import { bytes } from "../render.ts";

const USAGE =
  "snapshot SESSION NAME [-n NAMESPACE]   (the session's files and conversation, between two requests)";

/**
 * `snapshot`: a SessionSnapshot of a HarnessSession (`POST …/harnesssessions/{name}:snapshot`),
 * running, paused or stopped; answered once the copy is Ready.
 */
export const snapshot: Command = {
  name: "snapshot",
  usage: USAGE,
  summary: "take a snapshot of a session: its workspace files and its agent's conversation",
  examples: ["agent-sessions snapshot coding before-refactor"],
  async run(argv) {
    const parsed = parseCommand(argv, USAGE, {});
    const [session = "", name = ""] = positionals(parsed.positionals, ["SESSION", "NAME"], USAGE);
    const ctx = contextFrom(parsed.values);
    const taken = await ctx.client.snapshot(ctx.namespace, session, name);
    if (ctx.json) ctx.out(JSON.stringify(taken));
    else if (!ctx.quiet)
      ctx.out(
        `sessionsnapshot/${name} taken of harnesssession/${session} (${bytes(taken.status.sizeBytes ?? 0)})`,
      );
    return 0;
  },
};
