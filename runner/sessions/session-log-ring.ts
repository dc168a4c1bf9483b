import { LOG_LINE_BYTES_MAX, type LogLine, type LogSource } from "../../contracts/session-logs.ts";
import { AGENT_PID_MARKER } from "../engine/agent-exec.ts";
import { redactLine } from "./log-redaction.ts";

/** Lines kept per session; older ones are dropped first. */
export const RING_LINES_MAX = 2_000;
/** Bytes kept per session (lines' text). */
export const RING_BYTES_MAX = 512 * 1024;

type Ring = { lines: LogLine[]; bytes: number; dropped: boolean; partial: Record<string, string> };

/**
 * The runner's own record of each session's agent output it reads (the agent's stderr and its
 * ending), a bounded ring per workspace (`RING_LINES_MAX` lines, `RING_BYTES_MAX` bytes), secrets
 * redacted as they come in. The workload's output is the engine's to keep (driver.workloadLogs).
 */
export class SessionLogRing {
  readonly #rings = new Map<string, Ring>();
  readonly #secrets = new Map<string, string[]>();
  readonly #now: () => Date;

  constructor(now: () => Date = () => new Date()) {
    this.#now = now;
  }

  /** Values given to this workspace that must never be shown (credentials, tokens). */
  setSecrets(containerName: string, secrets: readonly string[]): void {
    this.#secrets.set(containerName, [...secrets]);
  }

  secretsOf(containerName: string): readonly string[] {
    return this.#secrets.get(containerName) ?? [];
  }

  /** A chunk of a stream: split into lines (a partial last line waits for the rest). */
  write(containerName: string, source: LogSource, stream: "stdout" | "stderr", chunk: string): void {
    const ring = this.#ring(containerName);
    const key = `${source}/${stream}`;
    const text = (ring.partial[key] ?? "") + chunk;
    const parts = text.split("\n");
    ring.partial[key] = (parts.pop() ?? "").slice(0, LOG_LINE_BYTES_MAX);
    for (const line of parts) this.note(containerName, source, stream, line);
  }

  /** One whole line (the runner's own notes: "agent exited with code 3"). */
  note(containerName: string, source: LogSource, stream: "stdout" | "stderr", raw: string): void {
    if (raw.startsWith(AGENT_PID_MARKER)) return; // the exec wrapper's note, not the agent's
    const ring = this.#ring(containerName);
    const cut =
      raw.length > LOG_LINE_BYTES_MAX
        ? `${raw.slice(0, LOG_LINE_BYTES_MAX)}… (${raw.length - LOG_LINE_BYTES_MAX} more characters)`
        : raw;
    const line = redactLine(cut.replace(/\r$/, ""), this.secretsOf(containerName));
    ring.lines.push({ ts: this.#now().toISOString(), source, stream, line });
    ring.bytes += line.length;
    while (ring.lines.length > RING_LINES_MAX || ring.bytes > RING_BYTES_MAX) {
      const old = ring.lines.shift();
      ring.bytes -= old?.line.length ?? 0;
      ring.dropped = true;
    }
  }

  /** The kept lines (after `since`, when given) and whether older ones were dropped. */
  read(containerName: string, since?: string): { lines: LogLine[]; dropped: boolean } {
    const ring = this.#rings.get(containerName);
    if (!ring) return { lines: [], dropped: false };
    const lines = since === undefined ? [...ring.lines] : ring.lines.filter((l) => l.ts > since);
    return { lines, dropped: ring.dropped };
  }

  /** The workspace is gone: forget its lines and secrets. */
  forget(containerName: string): void {
    this.#rings.delete(containerName);
    this.#secrets.delete(containerName);
  }

  #ring(containerName: string): Ring {
    let ring = this.#rings.get(containerName);
    if (!ring) {
      ring = { lines: [], bytes: 0, dropped: false, partial: {} };
      this.#rings.set(containerName, ring);
    }
    return ring;
  }
}
