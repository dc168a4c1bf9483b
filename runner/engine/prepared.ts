/**
 * Work started ahead of the operation that uses it (issue 38: a restore's copy pod started while
 * the session is still being stopped), kept by key for a bounded time. The operation takes it by
 * its key and tag (what it was made for, e.g. the snapshot's storage); one made for another tag,
 * replaced by a newer one, or not taken in time is disposed of, so nothing started ahead outlives
 * its use. Values are promises: a start still under way is handed over as it is, and one that
 * failed is disposed of as nothing (its own failure path cleaned up).
 */
export class Prepared<T> {
  readonly #ttlMs: number;
  readonly #dispose: (value: T) => Promise<void>;
  readonly #entries = new Map<string, { tag: string; value: Promise<T>; timer: NodeJS.Timeout }>();

  /** `ttlMs`: how long one waits to be taken; `dispose`: ends one not taken (never throws). */
  constructor(ttlMs: number, dispose: (value: T) => Promise<void>) {
    this.#ttlMs = ttlMs;
    this.#dispose = dispose;
  }

  /** How many wait to be taken. */
  get size(): number {
    return this.#entries.size;
  }

  /** Keeps `value` for `key` (made for `tag`); an earlier one of `key` is disposed of. */
  put(key: string, tag: string, value: Promise<T>): void {
    // A start that fails is nobody's to clean up here; the taker sees the rejection itself.
    value.catch(() => undefined);
    void this.#drop(key);
    const timer = setTimeout(() => void this.#drop(key), this.#ttlMs);
    timer.unref();
    this.#entries.set(key, { tag, value, timer });
  }

  /**
   * The value kept for `key` when it was made for `tag` (no longer kept from now on); undefined
   * when there is none, or it was made for another tag (then it is disposed of).
   */
  take(key: string, tag: string): Promise<T> | undefined {
    const entry = this.#entries.get(key);
    if (!entry) return undefined;
    if (entry.tag !== tag) {
      void this.#drop(key);
      return undefined;
    }
    clearTimeout(entry.timer);
    this.#entries.delete(key);
    return entry.value;
  }

  /** Disposes of every value kept (resolves once each is). */
  async close(): Promise<void> {
    await Promise.all([...this.#entries.keys()].map((key) => this.#drop(key)));
  }

  async #drop(key: string): Promise<void> {
    const entry = this.#entries.get(key);
    if (!entry) return;
    clearTimeout(entry.timer);
    this.#entries.delete(key);
    const value = await entry.value.then(
      (v) => ({ v }),
      () => undefined,
    );
    if (value) await this.#dispose(value.v).catch(() => undefined);
  }
}
