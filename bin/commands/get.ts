import { API_VERSION } from "../../contracts/resources.ts";
import { KIND_OF_PLURAL } from "../../client/index.ts";
import { contextFrom } from "../cli-context.ts";
import { type Command, parseCommand, positionals } from "../command.ts";
import { parseKind } from "../kinds.ts";
import { formatData, parseOutput, resourceTable } from "../render.ts";

const USAGE =
  "get KIND [NAME] [-n NAMESPACE] [-o table|json|yaml]   (KIND: agentruntimes|art, agents, mcpservers|mcp, skillpacks|sp, harnesssessions|hs, sessionsnapshots|snapshots, webhooks|wh, sessions)";

/** `get`: one object or the list of a kind; `sessions` are the agent sessions of GetAgentStatus. */
export const get: Command = {
  name: "get",
  usage: USAGE,
  summary: "list resources or show one",
  async run(argv) {
    const parsed = parseCommand(argv, USAGE, { output: { type: "string", short: "o" } });
    const [kindText, name] = positionals(parsed.positionals, ["KIND", "NAME"], USAGE, 1);
    const kind = parseKind(kindText ?? "");
    const ctx = contextFrom(parsed.values);
    const format = parseOutput(parsed.values.output, ctx.json);
    let data: unknown;
    let rows: unknown[];
    if (kind === "sessions") {
      if (name) {
        rows = (await ctx.client.rpc("GetAgentStatus", { session_id: name })).sessions;
        data = rows[0];
      } else {
        rows = await ctx.client.allSessionStatuses();
        data = { sessions: rows };
      }
    } else if (name) {
      data = await ctx.client.get(kind, ctx.namespace, name);
      rows = [data];
    } else {
      rows = await ctx.client.listAll(kind, ctx.namespace);
      data = { apiVersion: API_VERSION, kind: `${KIND_OF_PLURAL[kind]}List`, items: rows };
    }
    if (format !== "table") ctx.out(formatData(data, format));
    else if (rows.length === 0) ctx.note(`no ${kind} in namespace ${ctx.namespace}`);
    else ctx.out(resourceTable(kind, rows));
    return 0;
  },
};
