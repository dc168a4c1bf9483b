/**
 * A deadline that counts only the time this process was seen running. A machine can stop for a
 * minute and go on (a paused or live-migrated VM, a starved host: CI once saw every process on its
 * machine fall silent for 62 s), and a deadline read from the clock alone then passes in one
 * step: a wait for something that was fine all along fails, or falls back, on the first check
 * after the pause. Polling loops check this instead: each check credits the time since the one
 * before, but no more than `maxStepMs` of it, so a pause costs at most one step. A loop whose own
 * steps take longer than `maxStepMs` waits longer than `ms` by as much; keep it above them.
 */
export class AwakeDeadline {
  readonly #ms: number;
  readonly #maxStepMs: number;
  readonly #now: () => number;
  #spent = 0;
  #last: number;

  constructor(ms: number, options: { maxStepMs?: number; now?: () => number } = {}) {
    this.#ms = ms;
    this.#maxStepMs = options.maxStepMs ?? AWAKE_STEP_MS;
    this.#now = options.now ?? (() => performance.now());
    this.#last = this.#now();
  }

  /** Whether `ms` of running time has passed since the deadline was made (a check credits time). */
  passed(): boolean {
    const now = this.#now();
    this.#spent += Math.min(Math.max(0, now - this.#last), this.#maxStepMs);
    this.#last = now;
    return this.#spent >= this.#ms;
  }

  /** Running time left (≥ 0), as of the last check. */
  get remainingMs(): number {
    return Math.max(0, this.#ms - this.#spent);
  }
}

/** The longest step a check credits by default: above any one probe of the project's polling loops. */
export const AWAKE_STEP_MS = 10_000;

/**
 * How late a periodic tick ran beyond its interval, when that says the process was stopped (more
 * than a whole interval late); 0 otherwise. Heartbeat checks move their last-heard times on by it:
 * a peer cannot be heard while this process does not run (PROTOCOL.md §4).
 */
export function stalledTick(previousTickAt: number, now: number, intervalMs: number): number {
  const late = now - previousTickAt - intervalMs;
  return late > intervalMs ? late : 0;
}
