import type { ApiErrorBody } from "../contracts/errors.ts";
import type { RelayChunk } from "./runner-hub.ts";

export type InboxEvent =
  | { kind: "chunk"; data: string; done: boolean; status?: number | undefined }
  | { kind: "error"; error: ApiErrorBody };

/**
 * The `relay_chunk`s of one relayed request, in arrival order, for one consumer that awaits them
 * (and awaits its client's writer in between: that is the backpressure). Closes on the `done`
 * chunk or the first failure (deadline, client gone, runner error); anything after is dropped.
 * `bytes` counts what was queued, so the consumer can bound the reply.
 */
export class RelayInbox {
  readonly #items: InboxEvent[] = [];
  #closed = false;
  #wake: (() => void) | undefined;
  #bytes = 0;

  push(chunk: RelayChunk): void {
    if (this.#closed) return;
    this.#bytes += Buffer.byteLength(chunk.data);
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
