/**
 * One task per key at a time, in this process, in arrival order; different keys run concurrently.
 * Shared by the server (proxy/lifecycle/keyed-mutex.ts builds its locks on it) and the runner.
 */
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

  /** Whether a task of the key is running or waiting. */
  busy(key: string): boolean {
    return this.#tails.has(key);
  }
}
