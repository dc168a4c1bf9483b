import { contextFrom } from "../cli-context.ts";
import { type Command, parseCommand, positionals } from "../command.ts";
import { formatData, parseOutput, resourceTable } from "../render.ts";

const USAGE = "snapshots [SESSION] [-n NAMESPACE] [-o table|json|yaml]   (only SESSION's when named)";

/** `snapshots`: the namespace's SessionSnapshots (`get sessionsnapshots`), or one session's. */
export const snapshots: Command = {
  name: "snapshots",
  usage: USAGE,
  summary: "list the snapshots of a namespace, or of one session",
  flags: [["-o, --output FORMAT", "table (default), json or yaml"]],
  examples: ["agent-sessions snapshots", "agent-sessions snapshots coding"],
  async run(argv) {
    const parsed = parseCommand(argv, USAGE, { output: { type: "string", short: "o" } });
    const [session] = positionals(parsed.positionals, ["SESSION"], USAGE, 1);
    const ctx = contextFrom(parsed.values);
    const format = parseOutput(parsed.values.output, ctx.json);
    const items = (await ctx.client.listAll("sessionsnapshots", ctx.namespace)).filter(
      (s) => session === undefined || s.spec.sessionRef === session,
    );
    if (format !== "table") ctx.out(formatData({ items }, format));
    else if (items.length === 0)
      ctx.note(`no snapshots${session ? ` of harnesssession/${session}` : ""} in namespace ${ctx.namespace}`);
    else ctx.out(resourceTable("sessionsnapshots", items));
    return 0;
  },
};
