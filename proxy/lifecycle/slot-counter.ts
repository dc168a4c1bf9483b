/** What `SlotCounter.acquire` answers: the release of the slots taken, or the first key that was full. */
export type SlotGrant = { ok: true; release: () => void } | { ok: false; key: string; held: number };

/**
 * Slots held per key (a token id, a namespace), at most `max` a key, in this process. Several keys
 * are taken all or none, so a refusal on one never leaves a slot held on another; the release
 * gives each back once, however many times it is called (success, error and client-gone paths
 * may all reach it).
 */
export class SlotCounter {
  readonly #held = new Map<string, number>();
  readonly #max: number;

  constructor(max: number) {
    this.#max = max;
  }

  get max(): number {
    return this.#max;
  }

  acquire(keys: Iterable<string>): SlotGrant {
    const unique = [...new Set(keys)];
    for (const key of unique) {
      const held = this.#held.get(key) ?? 0;
      if (held >= this.#max) return { ok: false, key, held };
    }
    for (const key of unique) this.#held.set(key, (this.#held.get(key) ?? 0) + 1);
    let released = false;
    return {
      ok: true,
      release: () => {
        if (released) return;
        released = true;
        for (const key of unique) {
          const left = (this.#held.get(key) ?? 1) - 1;
          if (left > 0) this.#held.set(key, left);
          else this.#held.delete(key);
        }
      },
    };
  }
}
