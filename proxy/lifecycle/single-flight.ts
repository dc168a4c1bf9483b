/**
 * Concurrent calls with the same key share one execution and its outcome (Go's singleflight):
 * retries of one request that arrive while it runs do not run it again.
 */
export class SingleFlight {
  readonly #inFlight = new Map<string, Promise<unknown>>();

  run<T>(key: string, fn: () => Promise<T>): Promise<T> {
    const running = this.#inFlight.get(key);
    if (running) return running as Promise<T>;
    const started = fn().finally(() => {
      this.#inFlight.delete(key);
    });
    this.#inFlight.set(key, started);
    return started;
  }
}
