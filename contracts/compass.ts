import { z } from "zod";

/**
 * compass.v1: newline-delimited JSON frames, one object a line. Every frame carries the protocol
 * tag, a per-session monotonically increasing `seq`, the `session_id`, a `type`, a timestamp and
 * a payload. Status transitions are frames too.
 */
export const COMPASS_PROTOCOL = "compass.v1";

export const FrameType = z.enum(["status", "message", "delta", "tool", "log", "result", "error"]);
export type FrameType = z.infer<typeof FrameType>;

/**
 * The types an agent may emit: every type but `status`. Status frames are the server's record of
 * a session's transitions (STARTING, READY, …); one forged by an agent would be stored and fanned
 * out like a real transition, so the runner refuses it and so does the server.
 */
export const AgentFrameType = FrameType.exclude(["status"]);
export type AgentFrameType = z.infer<typeof AgentFrameType>;

export const SessionState = z.enum(["STARTING", "READY", "STOPPING", "STOPPED", "ERRORED", "DISCONNECTED"]);
export type SessionState = z.infer<typeof SessionState>;

export const Frame = z.object({
  protocol: z.literal(COMPASS_PROTOCOL),
  seq: z.number().int().nonnegative(),
  session_id: z.string().min(1),
  type: FrameType,
  ts: z.string().datetime(),
  payload: z.record(z.string(), z.unknown()),
});
export type Frame = z.infer<typeof Frame>;

/**
 * A frame as `GET /v1/events` sends it (issue 42): the stored frame and, added by the server,
 * `namespace` (its session's Agent's) and `name` (the HarnessSession the agent session runs for;
 * absent for a session opened over the RPC API). Additive: a reader of `Frame` reads it unchanged.
 */
export const EventFrame = Frame.extend({
  namespace: z.string().min(1).optional(),
  name: z.string().min(1).optional(),
});
export type EventFrame = z.infer<typeof EventFrame>;

/** What the agent writes: a frame before the relay assigns the session's seq and id. */
export const AgentFrame = z.object({
  protocol: z.literal(COMPASS_PROTOCOL),
  type: AgentFrameType,
  ts: z.string().datetime().optional(),
  payload: z.record(z.string(), z.unknown()).default({}),
});
export type AgentFrame = z.infer<typeof AgentFrame>;

export type ParsedLine = { ok: true; frame: AgentFrame } | { ok: false; reason: string };

/** Longest line a relay accepts; a longer one becomes an error frame. */
export const MAX_FRAME_LINE_BYTES = 256 * 1024;

/** Why an agent's `status` frame is refused (the runner says so in the error frame it sends instead). */
export const FORGED_STATUS_REASON = "status frames come only from the server";

/**
 * Parse one stdout line of an agent. Never throws: a malformed line is a value the relay turns
 * into an `error` frame.
 */
export function parseAgentLine(line: string): ParsedLine {
  if (line.length > MAX_FRAME_LINE_BYTES)
    return { ok: false, reason: `line longer than ${MAX_FRAME_LINE_BYTES} bytes` };
  let json: unknown;
  try {
    json = JSON.parse(line);
  } catch {
    return { ok: false, reason: "not JSON" };
  }
  if ((json as { type?: unknown } | null)?.type === "status")
    return { ok: false, reason: FORGED_STATUS_REASON };
  const parsed = AgentFrame.safeParse(json);
  if (!parsed.success)
    return { ok: false, reason: `not a compass.v1 frame: ${parsed.error.issues[0]?.message ?? "invalid"}` };
  return { ok: true, frame: parsed.data };
}

/** One result of splitting: a complete line, or notice that a line outgrew the bound (dropped). */
export type SplitItem = { kind: "line"; line: string } | { kind: "overlong"; limitBytes: number };

const NEWLINE = 0x0a;
const encoder = new TextEncoder();

/**
 * Splits a byte stream into lines, holding at most `maxLineBytes` of an unfinished line. A line
 * that grows past the bound is dropped whole: one `overlong` item when it crosses the bound, then
 * its bytes are discarded up to its newline (an agent writing 200 MB without one costs the
 * bound, not 200 MB). Lines are decoded as UTF-8 once complete, so a character split across
 * chunks stays whole; a byte-order mark is a character except at the stream's very start. Blank
 * lines are skipped.
 */
export class LineSplitter {
  readonly #max: number;
  /** BOMs kept: only the stream's own first one is dropped (#takeLine), as decoding it whole would. */
  readonly #decoder = new TextDecoder("utf-8", { ignoreBOM: true });
  /** No newline seen yet: the line being read starts the stream. */
  #first = true;
  #parts: Uint8Array[] = [];
  #size = 0;
  #discarding = false;

  /** @param maxLineBytes @default MAX_FRAME_LINE_BYTES */
  constructor(maxLineBytes = MAX_FRAME_LINE_BYTES) {
    this.#max = maxLineBytes;
  }

  /** Bytes held of the unfinished line (never more than the bound). */
  get pendingBytes(): number {
    return this.#size;
  }

  push(chunk: Uint8Array | string): SplitItem[] {
    const bytes = typeof chunk === "string" ? encoder.encode(chunk) : chunk;
    const out: SplitItem[] = [];
    let start = 0;
    for (;;) {
      const newline = bytes.indexOf(NEWLINE, start);
      const end = newline === -1 ? bytes.length : newline;
      if (!this.#discarding && end > start) {
        if (this.#size + (end - start) > this.#max) {
          this.#discarding = true;
          this.#parts = [];
          this.#size = 0;
          out.push({ kind: "overlong", limitBytes: this.#max });
        } else {
          // A copy: a short tail must not keep the engine's whole chunk alive.
          this.#parts.push(bytes.slice(start, end));
          this.#size += end - start;
        }
      }
      if (newline === -1) return out;
      this.#takeLine(out);
      start = newline + 1;
    }
  }

  /** The unfinished last line, when the stream ends. */
  flush(): SplitItem[] {
    const out: SplitItem[] = [];
    this.#takeLine(out);
    return out;
  }

  #takeLine(out: SplitItem[]): void {
    if (!this.#discarding && this.#size > 0) {
      const whole = new Uint8Array(this.#size);
      let at = 0;
      for (const part of this.#parts) {
        whole.set(part, at);
        at += part.length;
      }
      const decoded = this.#decoder.decode(whole);
      const line = this.#first && decoded.startsWith("\uFEFF") ? decoded.slice(1) : decoded;
      if (line.trim().length > 0) out.push({ kind: "line", line });
    }
    this.#first = false;
    this.#parts = [];
    this.#size = 0;
    this.#discarding = false;
  }
}
