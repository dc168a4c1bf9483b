import { z } from "zod";

/**
 * A session's logs (issue 42): `GET /v1/namespaces/{ns}/harnesssessions/{name}/logs`. What the
 * runner saw of the session's processes: the workload's own output as the engine kept it (the
 * adapter or harness: Docker's container log, the pod's log on Kubernetes) and the stderr of the
 * agent the runner execs into it, with what the runner noted of its end (an exit code). Bounded on
 * the runner (a ring per session) and in each answer; secrets redacted before they leave the runner.
 */
export const LogSource = z.enum(["workload", "agent", "runner"]);
export type LogSource = z.infer<typeof LogSource>;

export const LogLine = z.object({
  /** When the line was written (the engine's timestamp, or when the runner read it). */
  ts: z.string(),
  source: LogSource,
  stream: z.enum(["stdout", "stderr"]),
  line: z.string(),
});
export type LogLine = z.infer<typeof LogLine>;

/** The most lines one answer carries (`tailLines` above it is refused). */
export const LOG_TAIL_LINES_MAX = 10_000;
/** The most bytes of lines one answer carries; older lines beyond it are left out. */
export const LOG_LIMIT_BYTES_MAX = 4 * 1024 * 1024;
/** A longer line is cut here (with a note of how much was cut). */
export const LOG_LINE_BYTES_MAX = 16 * 1024;

/** What a client may ask: the last `tailLines` lines, after `sinceTime`, within `limitBytes`. */
export const LogQuery = z.object({
  tailLines: z.coerce.number().int().min(0).max(LOG_TAIL_LINES_MAX).default(500),
  limitBytes: z.coerce
    .number()
    .int()
    .min(1)
    .max(LOG_LIMIT_BYTES_MAX)
    .default(1024 * 1024),
  /** Only lines written after this instant (RFC 3339). */
  sinceTime: z.iso.datetime({ offset: true }).optional(),
  /** Keep the answer open and send new lines as they come, until the client leaves. */
  follow: z
    .enum(["true", "false"])
    .default("false")
    .transform((v) => v === "true"),
});
export type LogQuery = z.infer<typeof LogQuery>;

/** The answer without `follow` (JSON), and each `follow` event's `lines`. */
export const SessionLogsReply = z.object({
  namespace: z.string(),
  name: z.string(),
  lines: z.array(LogLine),
  /** True when older lines were left out (the tail, the byte limit or the runner's ring). */
  truncated: z.boolean(),
});
export type SessionLogsReply = z.infer<typeof SessionLogsReply>;

/** The last lines within `tailLines` and `limitBytes`, and whether any were left out. Pure. */
export function tailOf(
  lines: readonly LogLine[],
  tailLines: number,
  limitBytes: number,
): { lines: LogLine[]; truncated: boolean } {
  const out: LogLine[] = [];
  let bytes = 0;
  for (let i = lines.length - 1; i >= 0 && out.length < tailLines; i--) {
    const line = lines[i] as LogLine;
    bytes += Buffer.byteLength(line.line) + 1;
    if (bytes > limitBytes) break;
    out.push(line);
  }
  out.reverse();
  return { lines: out, truncated: out.length < lines.length };
}

/** `2026-12-06T11:00:00.000Z agent/stderr  text`: one line as `agent-sessions logs` prints it. */
export function formatLogLine(l: LogLine): string {
  return `${l.ts} ${`${l.source}/${l.stream}`.padEnd(15)} ${l.line}`;
}
