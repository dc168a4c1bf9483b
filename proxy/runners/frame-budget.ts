/**
 * The server's per-session budget for frames from runners, checked before a frame is queued for
 * its SQLite write: a runner that does not throttle its agents (an old one, a broken one, a
 * stolen token) cannot make the server write without bound. Over budget, frames are dropped; the
 * first drop of a spell is replaced by one notice (an `error` frame), so followers see that
 * output is missing, without one write per dropped frame. Time comes in as `now` (ms).
 */
import { TokenBucket } from "../../contracts/token-bucket.ts";

export type FrameBudgetLimits = {
  /** @default 4000 */
  framesPerSecond: number;
  /** Envelope bytes. @default 16777216 */
  bytesPerSecond: number;
  /** How many seconds' worth may come at once (a runner flushing its offline queue). @default 2 */
  burstSeconds?: number;
};

export const DEFAULT_FRAME_BUDGET: Required<FrameBudgetLimits> = {
  framesPerSecond: 4_000,
  bytesPerSecond: 16 * 1024 * 1024,
  burstSeconds: 2,
};

/** `admit`: store it; `drop`: drop it; `notice`: drop it and store the budget notice instead. */
export type Admission = "admit" | "drop" | "notice";

type Account = { frames: TokenBucket; bytes: TokenBucket; dropping: boolean };

/** Sessions tracked at most; idle ones (full buckets) are forgotten first. */
const MAX_ACCOUNTS = 10_000;

export class FrameBudget {
  readonly limits: Required<FrameBudgetLimits>;
  readonly #accounts = new Map<string, Account>();

  constructor(limits: Partial<FrameBudgetLimits> = {}) {
    this.limits = { ...DEFAULT_FRAME_BUDGET, ...limits };
  }

  admit(sessionId: string, bytes: number, now: number): Admission {
    const account = this.#account(sessionId, now);
    if (account.frames.tokens(now) >= 1 && account.bytes.tokens(now) >= bytes) {
      account.frames.take(1, now);
      account.bytes.take(bytes, now);
      account.dropping = false;
      return "admit";
    }
    if (account.dropping) return "drop";
    account.dropping = true;
    return "notice";
  }

  /** The notice stored in place of the first frame a spell of drops loses. */
  notice(): { type: "error"; payload: Record<string, unknown> } {
    return {
      type: "error",
      payload: {
        message: "frames dropped: the session's output exceeds the server's budget",
        frames_per_second: this.limits.framesPerSecond,
        bytes_per_second: this.limits.bytesPerSecond,
      },
    };
  }

  get size(): number {
    return this.#accounts.size;
  }

  #account(sessionId: string, now: number): Account {
    let account = this.#accounts.get(sessionId);
    if (account) return account;
    if (this.#accounts.size >= MAX_ACCOUNTS) this.#forget(now);
    const { framesPerSecond, bytesPerSecond, burstSeconds } = this.limits;
    account = {
      frames: new TokenBucket(framesPerSecond, framesPerSecond * burstSeconds, now),
      bytes: new TokenBucket(bytesPerSecond, bytesPerSecond * burstSeconds, now),
      dropping: false,
    };
    this.#accounts.set(sessionId, account);
    return account;
  }

  /** Forget sessions with full buckets (nothing to remember); if none, the oldest half. */
  #forget(now: number): void {
    for (const [id, a] of this.#accounts)
      if (!a.dropping && a.frames.full(now) && a.bytes.full(now)) this.#accounts.delete(id);
    if (this.#accounts.size < MAX_ACCOUNTS) return;
    let excess = this.#accounts.size - MAX_ACCOUNTS / 2;
    for (const id of this.#accounts.keys()) {
      if (excess-- <= 0) break;
      this.#accounts.delete(id);
    }
  }
}
