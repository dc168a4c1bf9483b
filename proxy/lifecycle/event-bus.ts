import type { StoredFrame } from "../store/store.ts";

export type FrameListener = (frame: StoredFrame) => void;

/**
 * In-process fan-out of frames already written to the store: the store is the record, the bus
 * only wakes live followers. With several server replicas over PostgreSQL, each replica's bus
 * is fed from the store, in frame id order, with every replica's frames (LISTEN/NOTIFY wakes it:
 * proxy/cluster/postgres-replica-cluster.ts).
 *
 * A follower of one session is woken only by that session's frames (publish costs the
 * followers of everything plus those of the frame's session, not every follower there is).
 */
export class EventBus {
  readonly #everything = new Set<FrameListener>();
  readonly #bySession = new Map<string, Set<FrameListener>>();

  /** Every frame, or only `sessionId`'s. Returns the unsubscribe. */
  subscribe(listener: FrameListener, sessionId?: string): () => void {
    if (sessionId === undefined) {
      this.#everything.add(listener);
      return () => {
        this.#everything.delete(listener);
      };
    }
    let listeners = this.#bySession.get(sessionId);
    if (!listeners) {
      listeners = new Set();
      this.#bySession.set(sessionId, listeners);
    }
    listeners.add(listener);
    return () => {
      const current = this.#bySession.get(sessionId);
      if (!current?.delete(listener) || current.size > 0) return;
      this.#bySession.delete(sessionId);
    };
  }

  publish(frame: StoredFrame): void {
    for (const listener of this.#everything) listener(frame);
    const followers = this.#bySession.get(frame.frame.session_id);
    if (followers) for (const listener of followers) listener(frame);
  }

  get size(): number {
    let n = this.#everything.size;
    for (const listeners of this.#bySession.values()) n += listeners.size;
    return n;
  }
}
