import type { LogLine } from "../../contracts/session-logs.ts";

/**
 * `2026-12-06T11:00:00.123456789Z text` lines (Docker's and the kubelet's `timestamps=true`) as
 * LogLines of the workload; a line without a timestamp gets `fallbackTs`. Pure.
 */
export function timestampedLines(text: string, stream: "stdout" | "stderr", fallbackTs: string): LogLine[] {
  const out: LogLine[] = [];
  for (const raw of text.split("\n")) {
    if (raw === "") continue;
    const space = raw.indexOf(" ");
    const head = space > 0 ? raw.slice(0, space) : "";
    const ms = Date.parse(head);
    if (Number.isNaN(ms))
      out.push({ ts: fallbackTs, source: "workload", stream, line: raw.replace(/\r$/, "") });
    else
      out.push({
        ts: new Date(ms).toISOString(),
        source: "workload",
        stream,
        line: raw.slice(space + 1).replace(/\r$/, ""),
      });
  }
  return out;
}
