import { Readable, type Writable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { contextFrom } from "../cli-context.ts";
import { type Command, parseCommand, positionals } from "../command.ts";

const USAGE = "diff SESSION [-n NAMESPACE]";

/**
 * `diff`: what changed in a HarnessSession's workspace since it was seeded from its repository
 * (`spec.workspace.repo`), as a git diff on stdout (`GET …/workspace:diff`, never an exec).
 */
export const diff: Command = {
  name: "diff",
  usage: USAGE,
  summary: "show the git diff of a session's workspace against the repository it was seeded from",
  examples: ["agent-sessions diff coding"],
  async run(argv) {
    const parsed = parseCommand(argv, USAGE, {});
    const [session = ""] = positionals(parsed.positionals, ["SESSION"], USAGE);
    const ctx = contextFrom(parsed.values);
    const body = await ctx.client.diffWorkspace(ctx.namespace, session);
    await pipeline(
      Readable.fromWeb(body as import("node:stream/web").ReadableStream),
      process.stdout as Writable,
    );
    return 0;
  },
};
