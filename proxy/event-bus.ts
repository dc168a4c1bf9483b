import type { StoredFrame } from "./store/store.ts";

export type FrameListener = (frame: StoredFrame) => void;

/**
 * In-process fan-out of frames already written to the store: the store is the record, the bus
 * only wakes live followers. Several server replicas would put LISTEN/NOTIFY (or NATS) behind
 * the same two methods.
 */
export class EventBus {
  readonly #listeners = new Set<FrameListener>();

  subscribe(listener: FrameListener): () => void {
    this.#listeners.add(listener);
    return () => {
      this.#listeners.delete(listener);
    };
  }

  publish(frame: StoredFrame): void {
    for (const listener of this.#listeners) listener(frame);
  }

  get size(): number {
    return this.#listeners.size;
  }
}
