import type { RunnerInfo } from "../../contracts/runners.ts";
import { contextFrom } from "../cli-context.ts";
import { type Command, parseCommand, positionals } from "../command.ts";
import { age, formatData, parseOutput, table } from "../render.ts";

const USAGE = "runners [RUNNER] [-o table|json|yaml]";

/** The runners as a table: capacity and load, labels, connection and drain state. */
export function runnerTable(items: readonly RunnerInfo[]): string {
  return table(
    ["NAME", "ENGINE", "STATUS", "LOAD", "SESSIONS", "LABELS", "LAST HELLO"],
    items.map((r) => [
      r.runner_name,
      r.engine,
      `${r.connected ? "Connected" : "Disconnected"}${r.draining ? ",Draining" : ""}`,
      `${r.load}/${r.capacity}`,
      String(r.live_sessions),
      Object.entries(r.labels)
        .map(([k, v]) => `${k}=${v}`)
        .join(",") || "<none>",
      age(r.last_seen_at),
    ]),
  );
}

/** `runners`: every runner that attached (or one), with what placement knows of it. */
export const runners: Command = {
  name: "runners",
  usage: USAGE,
  summary: "list runners: capacity, load, labels, connected, draining",
  async run(argv) {
    const parsed = parseCommand(argv, USAGE, { output: { type: "string", short: "o" } });
    const [name] = positionals(parsed.positionals, ["RUNNER"], USAGE, 1);
    const ctx = contextFrom(parsed.values);
    const format = parseOutput(parsed.values.output, ctx.json);
    const data = name ? await ctx.client.runner(name) : await ctx.client.runners();
    const rows = name ? [data as RunnerInfo] : (data as { items: RunnerInfo[] }).items;
    if (format !== "table") ctx.out(formatData(data, format));
    else if (rows.length === 0) ctx.note("no runner has attached to this server");
    else ctx.out(runnerTable(rows));
    return 0;
  },
};
