import { formatLogLine } from "../../contracts/session-logs.ts";
import { contextFrom, UsageError } from "../cli-context.ts";
import { type Command, parseCommand, positionals } from "../command.ts";

const USAGE = "logs SESSION [-n NAMESPACE] [-f] [--tail N] [--since-time RFC3339] [--limit-bytes N]";

/**
 * `logs`: what the runner saw of a HarnessSession's processes, the workload's output and its
 * agent's stderr (secrets redacted), one line each: time, source/stream, text. `-f` keeps
 * following until Ctrl-C (exit 0).
 */
export const logs: Command = {
  name: "logs",
  usage: USAGE,
  summary: "print a session's logs: its adapter's and agent's output (-f to follow)",
  description: `Prints what the runner saw of the session's processes: the workload's own output as the
engine keeps it (source workload: the adapter or harness) and the stderr of the agent the runner
execs into it (source agent), with the runner's notes (source runner: "agent exited with code 3").
Secrets the session was given are shown as [redacted]. Works on a Failed session too: that is
when you want it. With --json each line is a JSON object.`,
  flags: [
    ["-f, --follow", "keep printing new lines as they come, until Ctrl-C"],
    ["--tail N", "the last N lines (default 500; at most 10000)"],
    ["--since-time TIME", "only lines after TIME (RFC 3339, e.g. 2026-12-06T11:00:00Z)"],
    ["--limit-bytes N", "at most N bytes of lines (default 1 MiB)"],
  ],
  examples: [
    "agent-sessions logs coding               # the last 500 lines",
    "agent-sessions logs coding --tail 20 -f  # the last 20, then follow",
    "agent-sessions logs coding --json | jq -r 'select(.stream == \"stderr\") | .line'",
  ],
  async run(argv) {
    const parsed = parseCommand(argv, USAGE, {
      follow: { type: "boolean", short: "f", default: false },
      tail: { type: "string" },
      "since-time": { type: "string" },
      "limit-bytes": { type: "string" },
    });
    const [name = ""] = positionals(parsed.positionals, ["SESSION"], USAGE);
    const ctx = contextFrom(parsed.values);
    const int = (flag: string, text: string | undefined) => {
      if (text === undefined) return undefined;
      if (!/^\d+$/.test(text)) throw new UsageError(`--${flag} must be a whole number, got ${text}`);
      return Number(text);
    };
    const since = parsed.values["since-time"];
    if (since !== undefined && Number.isNaN(Date.parse(since)))
      throw new UsageError(
        `--since-time must be an RFC 3339 time such as 2026-12-06T11:00:00Z, got ${since}`,
      );
    const tailLines = int("tail", parsed.values.tail);
    const limitBytes = int("limit-bytes", parsed.values["limit-bytes"]);
    const options = {
      ...(tailLines !== undefined ? { tailLines } : {}),
      ...(limitBytes !== undefined ? { limitBytes } : {}),
      ...(since !== undefined ? { sinceTime: since } : {}),
    };
    const print = (l: Parameters<typeof formatLogLine>[0]) =>
      ctx.out(ctx.json ? JSON.stringify(l) : formatLogLine(l));
    if (!parsed.values.follow) {
      const reply = await ctx.client.sessionLogs(ctx.namespace, name, options);
      if (reply.truncated) ctx.note(`(older lines left out; --tail or --limit-bytes for more)`);
      for (const l of reply.lines) print(l);
      if (reply.lines.length === 0) ctx.note(`no log lines for harnesssession/${name} yet`);
      return 0;
    }
    const abort = new AbortController();
    const stop = () => abort.abort();
    process.once("SIGINT", stop);
    process.once("SIGTERM", stop);
    try {
      for await (const l of ctx.client.followSessionLogs(ctx.namespace, name, {
        ...options,
        signal: abort.signal,
      }))
        print(l);
    } finally {
      process.off("SIGINT", stop);
      process.off("SIGTERM", stop);
    }
    return 0;
  },
};
