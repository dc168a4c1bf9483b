import type { ApiErrorBody } from "../../contracts/errors.ts";
import type { RelayChunk } from "../lifecycle/runner-directory.ts";

/**
 * `details.reason` of a reply that outgrew its bound: the upstream's fault (502), not a quota of
 * the client's, though its code is RESOURCE_EXHAUSTED.
 */
export const REPLY_TOO_LARGE = "ReplyTooLarge";

export type InboxEvent =
  | { kind: "chunk"; data: string; done: boolean; status?: number | undefined }
  | { kind: "error"; error: ApiErrorBody };

export type RelayInboxOptions = {
  /** Bytes of reply the inbox takes in all; past it, it fails RESOURCE_EXHAUSTED. @default unbounded */
  maxBytes?: number;
  /** Told once when a push went past `maxBytes` (the caller cancels the upstream work). */
  onOverflow?: () => void;
};

/**
 * The `relay_chunk`s of one relayed request, in arrival order, for one consumer that awaits them
 * (and awaits its client's writer in between: that is the backpressure). Closes on the `done`
 * chunk or the first failure (deadline, client gone, runner error); anything after is dropped.
 * Bounded on push: a reply past `maxBytes` is never queued (a slow client behind a fast adapter
 * costs the server at most the bound), the inbox fails instead. `bytes` counts what was taken in.
 */
export class RelayInbox {
  readonly #items: InboxEvent[] = [];
  readonly #maxBytes: number;
  readonly #onOverflow: () => void;
  #closed = false;
  #wake: (() => void) | undefined;
  #bytes = 0;

  constructor(options: RelayInboxOptions = {}) {
    this.#maxBytes = options.maxBytes ?? Number.POSITIVE_INFINITY;
    this.#onOverflow = options.onOverflow ?? (() => {});
  }

  push(chunk: RelayChunk): void {
    if (this.#closed) return;
    const size = Buffer.byteLength(chunk.data);
    if (this.#bytes + size > this.#maxBytes) {
      this.fail({
        code: "RESOURCE_EXHAUSTED",
        message: `the agent's reply exceeds ${this.#maxBytes} bytes`,
        details: { limit_bytes: this.#maxBytes, reason: REPLY_TOO_LARGE },
      });
      this.#onOverflow();
      return;
    }
    this.#bytes += size;
    this.#items.push({ kind: "chunk", data: chunk.data, done: chunk.done, status: chunk.status });
    if (chunk.done) this.#closed = true;
    this.#notify();
  }

  fail(error: ApiErrorBody): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#items.push({ kind: "error", error });
    this.#notify();
  }

  get closed(): boolean {
    return this.#closed;
  }

  get bytes(): number {
    return this.#bytes;
  }

  /** The next event if one is already here (nothing waits). */
  ready(): InboxEvent | undefined {
    return this.#items.shift();
  }

  async next(): Promise<InboxEvent> {
    for (;;) {
      const item = this.#items.shift();
      if (item) return item;
      await new Promise<void>((resolve) => {
        this.#wake = resolve;
      });
    }
  }

  #notify(): void {
    const wake = this.#wake;
    this.#wake = undefined;
    wake?.();
  }
}
