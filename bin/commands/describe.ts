import { KIND_OF_PLURAL } from "../../client/resource-kinds.ts";
import { CommandFailed, contextFrom, ExitCode } from "../cli-context.ts";
import { type Command, parseCommand, positionals } from "../command.ts";
import { parseKind } from "../kinds.ts";
import { describeResource, describeSession, formatData } from "../render.ts";

const USAGE = "describe KIND NAME [-n NAMESPACE]";

/** `describe`: one object for people: metadata, spec, status and conditions (credentials hidden). */
export const describe: Command = {
  name: "describe",
  usage: USAGE,
  summary: "show one resource in detail",
  examples: [
    "agent-sessions describe hs coding     # spec, status and the conditions table",
    "agent-sessions describe agent alice   # credentials shown as set, never their values",
  ],
  async run(argv) {
    const parsed = parseCommand(argv, USAGE, {});
    const [kindText, name] = positionals(parsed.positionals, ["KIND", "NAME"], USAGE);
    const kind = parseKind(kindText ?? "");
    const ctx = contextFrom(parsed.values);
    if (kind === "sessions") {
      const { sessions } = await ctx.client.rpc("GetAgentStatus", { session_id: name ?? "" });
      const session = sessions[0];
      if (!session) throw new CommandFailed(`session ${name} not found`, ExitCode.notFound);
      ctx.out(ctx.json ? formatData(session, "json") : describeSession(session));
      return 0;
    }
    const resource = await ctx.client.get(kind, ctx.namespace, name ?? "");
    ctx.out(ctx.json ? formatData(resource, "json") : describeResource(KIND_OF_PLURAL[kind], resource));
    return 0;
  },
};
