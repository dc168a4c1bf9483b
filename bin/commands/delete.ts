import { contextFrom, UsageError } from "../cli-context.ts";
import { type Command, parseCommand, positionals } from "../command.ts";
import { objectRef, parseKind } from "../kinds.ts";

const USAGE = "delete KIND NAME [-n NAMESPACE]   (a HarnessSession's stack and volume go with it)";

/** `delete`: removes a resource; for a HarnessSession the server answers after the teardown. */
export const del: Command = {
  name: "delete",
  usage: USAGE,
  summary: "delete a resource",
  examples: [
    "agent-sessions delete hs coding       # its stack and volume go with it",
    "agent-sessions delete agent alice",
    "agent-sessions delete snapshot before-refactor",
  ],
  async run(argv) {
    const parsed = parseCommand(argv, USAGE, {});
    const [kindText, name = ""] = positionals(parsed.positionals, ["KIND", "NAME"], USAGE);
    const kind = parseKind(kindText ?? "");
    if (kind === "sessions")
      throw new UsageError(
        "agent sessions are not deleted directly: delete their HarnessSession, or call RemoveAgentWorkspace",
      );
    const ctx = contextFrom(parsed.values);
    if (kind === "harnesssessions")
      ctx.note(`deleting harnesssession/${name} (stack destroy, volume included)…`);
    await ctx.client.delete(kind, ctx.namespace, name);
    if (ctx.json) ctx.out(JSON.stringify({ kind, namespace: ctx.namespace, name, action: "deleted" }));
    else if (!ctx.quiet) ctx.out(`${objectRef(kind, name)} deleted`);
    return 0;
  },
};
