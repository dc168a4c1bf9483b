/**
 * Where an agent's stdout goes: a Writable the engine driver pipes the exec stream's stdout into.
 * It splits lines with a bound (a longer line is dropped, with a notice), and keeps each session
 * to a budget of bytes and frames per second. Over budget, or while the link to the server has
 * too much queued, it holds the write callback: the pipe stops reading, the engine's buffers fill
 * and the agent's own writes block. An agent that floods is throttled, not the runner.
 */
import { Writable } from "node:stream";
import { LineSplitter, MAX_FRAME_LINE_BYTES } from "../../contracts/compass.ts";
import { TokenBucket } from "../../contracts/token-bucket.ts";

export type OutputLimits = {
  /** Longest line kept; a longer one is dropped whole. @default MAX_FRAME_LINE_BYTES (256 KiB) */
  maxLineBytes: number;
  /** Stdout bytes a second per session (a second's worth may come at once). @default 4194304 */
  bytesPerSecond: number;
  /** Lines (frames) a second per session (a second's worth may come at once). @default 2000 */
  framesPerSecond: number;
};

export const DEFAULT_OUTPUT_LIMITS: OutputLimits = {
  maxLineBytes: MAX_FRAME_LINE_BYTES,
  bytesPerSecond: 4 * 1024 * 1024,
  framesPerSecond: 2_000,
};

export type AgentStdoutOptions = {
  limits: OutputLimits;
  /** One complete line (a frame to parse). */
  onLine(line: string): void;
  /** A line outgrew `limits.maxLineBytes` and is being dropped (once per such line). */
  onOverlong(limitBytes: number): void;
  /** True while the way to the server is backed up: no more is read until it is not. */
  congested?(): boolean;
  /** @default Date.now */
  now?(): number;
};

/** How often a held write looks again whether the link drained. */
const CONGESTION_POLL_MS = 20;
/** What the sink buffers before the pipe stops reading (on top of the engine's own buffers). */
const HIGH_WATER_BYTES = 64 * 1024;

export class AgentStdout extends Writable {
  readonly #o: Required<AgentStdoutOptions>;
  readonly #splitter: LineSplitter;
  readonly #bytes: TokenBucket;
  readonly #frames: TokenBucket;
  /** Time writes were held back by the budget or congestion, in ms (for logs and tests). */
  heldMs = 0;

  constructor(options: AgentStdoutOptions) {
    super({ highWaterMark: HIGH_WATER_BYTES, decodeStrings: true });
    this.#o = { congested: () => false, now: Date.now, ...options };
    const { limits } = options;
    const now = this.#o.now();
    this.#splitter = new LineSplitter(limits.maxLineBytes);
    this.#bytes = new TokenBucket(limits.bytesPerSecond, limits.bytesPerSecond, now);
    this.#frames = new TokenBucket(limits.framesPerSecond, limits.framesPerSecond, now);
  }

  override _write(chunk: Buffer, _encoding: BufferEncoding, callback: (error?: Error | null) => void): void {
    let frames = 0;
    try {
      frames = this.#deliver(this.#splitter.push(chunk));
    } catch (error) {
      callback(error as Error);
      return;
    }
    const now = this.#o.now();
    const wait = Math.max(this.#bytes.take(chunk.length, now), this.#frames.take(frames, now));
    this.#release(wait, now, callback);
  }

  override _final(callback: (error?: Error | null) => void): void {
    try {
      this.#deliver(this.#splitter.flush());
      callback();
    } catch (error) {
      callback(error as Error);
    }
  }

  #deliver(items: ReturnType<LineSplitter["push"]>): number {
    for (const item of items) {
      if (item.kind === "line") this.#o.onLine(item.line);
      else this.#o.onOverlong(item.limitBytes);
    }
    return items.length;
  }

  /** Calls back after `waitMs`, and then only once the link is not congested. */
  #release(waitMs: number, since: number, callback: () => void): void {
    const go = () => {
      if (this.#o.congested()) {
        setTimeout(go, CONGESTION_POLL_MS);
        return;
      }
      this.heldMs += this.#o.now() - since;
      callback();
    };
    if (waitMs > 0) setTimeout(go, waitMs);
    else go();
  }
}
