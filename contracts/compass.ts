import { z } from "zod";

/**
 * compass.v1: newline-delimited JSON frames, one object a line. Every frame carries the protocol
 * tag, a per-session monotonically increasing `seq`, the `session_id`, a `type`, a timestamp and
 * a payload. Status transitions are frames too.
 */
export const COMPASS_PROTOCOL = "compass.v1";

export const FrameType = z.enum(["status", "message", "delta", "tool", "log", "result", "error"]);
export type FrameType = z.infer<typeof FrameType>;

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

/** What the agent writes: a frame before the relay assigns the session's seq and id. */
export const AgentFrame = z.object({
  protocol: z.literal(COMPASS_PROTOCOL),
  type: FrameType,
  ts: z.string().datetime().optional(),
  payload: z.record(z.string(), z.unknown()).default({}),
});
export type AgentFrame = z.infer<typeof AgentFrame>;

export type ParsedLine = { ok: true; frame: AgentFrame } | { ok: false; reason: string };

/** Longest line a relay accepts; a longer one becomes an error frame. */
export const MAX_FRAME_LINE_BYTES = 256 * 1024;

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
  const parsed = AgentFrame.safeParse(json);
  if (!parsed.success)
    return { ok: false, reason: `not a compass.v1 frame: ${parsed.error.issues[0]?.message ?? "invalid"}` };
  return { ok: true, frame: parsed.data };
}

/** Splits a byte stream into lines; keeps the unfinished tail between chunks. */
export class LineSplitter {
  #tail = "";
  push(chunk: string): string[] {
    const text = this.#tail + chunk;
    const lines = text.split("\n");
    this.#tail = lines.pop() ?? "";
    if (this.#tail.length > MAX_FRAME_LINE_BYTES) {
      // An endless line: hand it over as is (it will be rejected) instead of growing forever.
      lines.push(this.#tail);
      this.#tail = "";
    }
    return lines.filter((l) => l.trim().length > 0);
  }
  flush(): string[] {
    const rest = this.#tail;
    this.#tail = "";
    return rest.trim() ? [rest] : [];
  }
}
