/**
 * A token bucket (the classic rate limiter): `ratePerSecond` tokens a second, at most `burst`
 * held. Time comes in as an argument (epoch ms), so the maths is pure and tests need no clock.
 * Used by the runner (an agent's output per session) and the server (frames per session).
 */
export class TokenBucket {
  readonly ratePerSecond: number;
  readonly burst: number;
  #tokens: number;
  #at: number;

  constructor(ratePerSecond: number, burst: number, now: number) {
    if (!(ratePerSecond > 0) || !(burst > 0))
      throw new RangeError("a token bucket needs a positive rate and burst");
    this.ratePerSecond = ratePerSecond;
    this.burst = burst;
    this.#tokens = burst;
    this.#at = now;
  }

  /** Tokens held at `now` (negative while in debt). */
  tokens(now: number): number {
    this.#refill(now);
    return this.#tokens;
  }

  /**
   * Takes `n` tokens even when that goes into debt; returns how many ms until the balance is
   * back to zero (0 when there was enough). A caller that then waits that long keeps the rate.
   */
  take(n: number, now: number): number {
    this.#refill(now);
    this.#tokens -= n;
    return this.#tokens >= 0 ? 0 : Math.ceil((-this.#tokens / this.ratePerSecond) * 1000);
  }

  /** Takes `n` tokens only when they are there; false (nothing taken) otherwise. */
  tryTake(n: number, now: number): boolean {
    this.#refill(now);
    if (this.#tokens < n) return false;
    this.#tokens -= n;
    return true;
  }

  /** True when the bucket is full again (its owner can forget it). */
  full(now: number): boolean {
    return this.tokens(now) >= this.burst;
  }

  #refill(now: number): void {
    if (now > this.#at) {
      this.#tokens = Math.min(this.burst, this.#tokens + ((now - this.#at) / 1000) * this.ratePerSecond);
      this.#at = now;
    }
  }
}
