/**
 * An Agent's budgets at the gateway (issue 35, Agent `spec.limits`): model calls per minute (a
 * token bucket holding a minute's calls) and model tokens per UTC day (input + output as the
 * provider reported them). Shared by every route of the Agent in this runner. The day's counts are
 * kept in a file when one is given (a runner restart goes on counting the same day; the rate
 * starts afresh, a minute at most). The file is written at most once every SAVE_DELAY_MS and when
 * the gateway closes (`flush`), not on every call: a write and rename on every model call was the
 * embedded runner's largest cost a relayed request. Time comes in as an argument (epoch ms).
 */
import { readFileSync } from "node:fs";
import { z } from "zod";
import type { AgentLimits } from "../../contracts/resources.ts";
import type { GatewayRefusal } from "../../contracts/runner-protocol.ts";
import { TokenBucket } from "../../contracts/token-bucket.ts";
import { writePrivateFile } from "./private-file.ts";

export type BudgetVerdict =
  | { ok: true }
  | {
      ok: false;
      reason: Exclude<GatewayRefusal["reason"], "ModelNotAllowed">;
      /** For the agent's model call and the session's event: a sentence a person understands. */
      message: string;
      /** Whole seconds until a call can pass again (the `retry-after` header). */
      retryAfterSeconds: number;
    };

type AgentState = { day: string; used: number; rate?: { perMinute: number; bucket: TokenBucket } };

const DAY_MS = 24 * 60 * 60 * 1000;

/** The UTC day of `now`, `YYYY-MM-DD`. */
function utcDay(now: number): string {
  return new Date(now).toISOString().slice(0, 10);
}

/** `1,000,000` rather than `1000000`: the message is read by people. */
function count(n: number): string {
  return n.toLocaleString("en-US");
}

/**
 * How late the file may be: a runner killed without closing its gateway (SIGKILL, a crash) has
 * lost at most this much of the day's counts when it restarts.
 */
export const SAVE_DELAY_MS = 1_000;

/** The file's name in the runner's data directory. */
export const GATEWAY_BUDGETS_FILE_NAME = "gateway-budgets.json";

const BudgetsFile = z.record(z.string(), z.object({ day: z.string(), used: z.number().nonnegative() }));

export class AgentBudgets {
  readonly #agents = new Map<string, AgentState>();
  readonly #file: string | undefined;
  /** The write due for counts not in the file yet. */
  #saveTimer: NodeJS.Timeout | undefined;

  /**
   * `file`: where the day's token counts are kept (loaded now, saved within SAVE_DELAY_MS of a
   * count and on `flush`); absent: memory only.
   */
  constructor(options: { file?: string } = {}) {
    this.#file = options.file;
    if (!this.#file) return;
    let text: string;
    try {
      text = readFileSync(this.#file, "utf8");
    } catch {
      return; // none yet
    }
    const parsed = BudgetsFile.safeParse(JSON.parse(text));
    // An unreadable count is started afresh rather than refusing to serve the sessions.
    if (parsed.success)
      for (const [agent, kept] of Object.entries(parsed.data)) this.#agents.set(agent, kept);
  }

  /**
   * May the Agent make one more model call at `now`? The day's tokens are checked first (a
   * refused call takes nothing from the rate), then one call is taken from the rate.
   */
  admit(agent: string, limits: AgentLimits | undefined, now: number): BudgetVerdict {
    if (limits?.tokensPerDay === undefined && limits?.requestsPerMinute === undefined) return { ok: true };
    const state = this.#state(agent, now);
    if (limits.tokensPerDay !== undefined && state.used >= limits.tokensPerDay) {
      const untilMidnight = DAY_MS - (now % DAY_MS);
      const inMinutes = Math.ceil(untilMidnight / 60_000);
      const hours = Math.floor(inMinutes / 60);
      const minutes = inMinutes % 60;
      return {
        ok: false,
        reason: "TokenBudgetExceeded",
        message:
          `Agent ${agent} has used ${count(state.used)} of its ${count(limits.tokensPerDay)} model tokens ` +
          `for today (UTC); the budget resets at 00:00 UTC, in ${hours} h ${minutes} min.`,
        retryAfterSeconds: Math.max(1, Math.ceil(untilMidnight / 1000)),
      };
    }
    const perMinute = limits.requestsPerMinute;
    if (perMinute === undefined) return { ok: true };
    if (state.rate?.perMinute !== perMinute)
      state.rate = { perMinute, bucket: new TokenBucket(perMinute / 60, perMinute, now) };
    if (state.rate.bucket.tryTake(1, now)) return { ok: true };
    const waitSeconds = Math.max(1, Math.ceil((1 - state.rate.bucket.tokens(now)) / (perMinute / 60)));
    return {
      ok: false,
      reason: "RequestRateExceeded",
      message:
        `Agent ${agent} may make ${count(perMinute)} model ${perMinute === 1 ? "call" : "calls"} a minute ` +
        `and has made them; try again in ${waitSeconds} s.`,
      retryAfterSeconds: waitSeconds,
    };
  }

  /** Counts tokens the provider reported for one of the Agent's calls, on the day of `now`. */
  record(agent: string, tokens: number, now: number): void {
    this.#state(agent, now).used += tokens;
    if (!this.#file || this.#saveTimer) return;
    this.#saveTimer = setTimeout(() => this.flush(), SAVE_DELAY_MS);
    this.#saveTimer.unref();
  }

  /** Writes the counts not in the file yet, now (the gateway closing). */
  flush(): void {
    if (!this.#saveTimer) return;
    clearTimeout(this.#saveTimer);
    this.#saveTimer = undefined;
    this.#save();
  }

  #save(): void {
    if (!this.#file) return;
    const kept = Object.fromEntries(
      [...this.#agents].map(([agent, { day, used }]) => [agent, { day, used }]),
    );
    writePrivateFile(this.#file, JSON.stringify(kept));
  }

  /** Tokens the Agent used on the UTC day of `now`. */
  used(agent: string, now: number): number {
    return this.#state(agent, now).used;
  }

  #state(agent: string, now: number): AgentState {
    const day = utcDay(now);
    let state = this.#agents.get(agent);
    if (!state) {
      state = { day, used: 0 };
      this.#agents.set(agent, state);
    } else if (state.day !== day) {
      state.day = day;
      state.used = 0;
    }
    return state;
  }
}
