/** One task per key at a time, in this process, in arrival order; different keys run concurrently. */
export class KeyedMutex {
  readonly #tails = new Map<string, Promise<unknown>>();

  async run<T>(key: string, fn: () => Promise<T>): Promise<T> {
    const previous = this.#tails.get(key) ?? Promise.resolve();
    const current = previous.then(fn, fn);
    const tail = current.catch(() => undefined);
    this.#tails.set(key, tail);
    try {
      return await current;
    } finally {
      if (this.#tails.get(key) === tail) this.#tails.delete(key);
    }
  }
}

/**
 * One task per key at a time: KeyedMutex within one process, or across every server replica over
 * one database (proxy/cluster/: an advisory lock per key behind the same method).
 */
export type KeyedLock = { run<T>(key: string, fn: () => Promise<T>): Promise<T> };

/** A KeyedLock per scope (`workspaces`, `sessions`, …): keys of two scopes never exclude each other. */
export type KeyedLocks = (scope: string) => KeyedLock;

/** The single-process locks: a KeyedMutex per scope. */
export const processLocks: KeyedLocks = () => new KeyedMutex();
