import type { RunnerInfo } from "../../contracts/runners.ts";
import { contextFrom, UsageError } from "../cli-context.ts";
import { type Command, parseCommand, positionals } from "../command.ts";
import { age, formatData, parseOutput, table } from "../render.ts";

const USAGE = "runners [RUNNER] [-o table|json|yaml] | runners token create|revoke RUNNER";
const TOKEN_USAGE = "runners token create|revoke RUNNER";

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
  flags: [["-o, --output FORMAT", "table (default), json or yaml"]],
  examples: [
    "agent-sessions runners",
    "agent-sessions runners gpu-1 -o yaml",
    "agent-sessions runners token create gpu-1   # a new credential, printed once",
  ],
  async run(argv) {
    if (argv[0] === "token") return runnerToken(argv.slice(1));
    const parsed = parseCommand(argv, USAGE, { output: { type: "string", short: "o" } });
    const [name] = positionals(parsed.positionals, ["RUNNER"], USAGE, 1);
    const ctx = contextFrom(parsed.values);
    const format = parseOutput(parsed.values.output, ctx.json);
    const data = name ? await ctx.client.runner(name) : { items: await ctx.client.allRunners() };
    const rows = name ? [data as RunnerInfo] : (data as { items: RunnerInfo[] }).items;
    if (format !== "table") ctx.out(formatData(data, format));
    else if (rows.length === 0) ctx.note("no runner has attached to this server");
    else ctx.out(runnerTable(rows));
    return 0;
  },
};

/**
 * `runners token create RUNNER`: a new credential for the runner, printed once (give it to the
 * runner as AGENT_SESSIONS_RUNNER_TOKEN; its older credential stops working). `runners token
 * revoke RUNNER`: forget it; the name may then register again with the runner token.
 */
async function runnerToken(argv: string[]): Promise<number> {
  const parsed = parseCommand(argv, TOKEN_USAGE, {});
  const [verb = "", name = ""] = positionals(parsed.positionals, ["create|revoke", "RUNNER"], TOKEN_USAGE);
  const ctx = contextFrom(parsed.values);
  if (verb === "create") {
    const issued = await ctx.client.issueRunnerToken(name);
    if (ctx.json) ctx.out(formatData(issued, "json"));
    else {
      ctx.out(issued.token);
      ctx.note(
        `runner/${issued.runner_name}: start it with AGENT_SESSIONS_RUNNER_TOKEN=<the token above>; its previous credential no longer works`,
      );
    }
    return 0;
  }
  if (verb === "revoke") {
    const revoked = await ctx.client.revokeRunnerToken(name);
    if (ctx.json) ctx.out(formatData(revoked, "json"));
    else
      ctx.note(
        revoked.revoked
          ? `runner/${name}: credential revoked; the name may register again with the runner token`
          : `runner/${name} held no credential`,
      );
    return 0;
  }
  throw new UsageError(
    `runners token: expected create or revoke, got "${verb}"\nusage: agent-sessions ${TOKEN_USAGE}`,
  );
}
