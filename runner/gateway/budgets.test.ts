import { existsSync, mkdtempSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it, vi } from "vitest";
import { AgentBudgets, SAVE_DELAY_MS } from "./budgets.ts";

const NOON = Date.parse("2026-12-05T12:00:00Z");

describe("AgentBudgets", () => {
  it("a restarted runner goes on counting the same day from its file (0600); the next day starts at zero", () => {
    const dir = mkdtempSync(join(tmpdir(), "gateway-budgets-"));
    try {
      const file = join(dir, "data", "gateway-budgets.json");
      const limits = { tokensPerDay: 1000 };
      const first = new AgentBudgets({ file });
      first.record("default/a", 1000, NOON);
      first.flush(); // as the gateway's close does (else within SAVE_DELAY_MS)
      expect(statSync(file).mode & 0o777).toBe(0o600);
      const restarted = new AgentBudgets({ file });
      expect(restarted.used("default/a", NOON)).toBe(1000);
      expect(restarted.admit("default/a", limits, NOON)).toMatchObject({
        ok: false,
        reason: "TokenBudgetExceeded",
      });
      expect(restarted.admit("default/a", limits, Date.parse("2026-12-06T00:00:01Z"))).toEqual({ ok: true });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("writes the counts once for a burst of calls, at most SAVE_DELAY_MS after the first, not once a call", () => {
    const dir = mkdtempSync(join(tmpdir(), "gateway-budgets-"));
    vi.useFakeTimers();
    try {
      const file = join(dir, "gateway-budgets.json");
      const budgets = new AgentBudgets({ file });
      for (let i = 0; i < 100; i += 1) budgets.record("default/a", 10, NOON);
      expect(existsSync(file)).toBe(false); // nothing written on the calls' path
      vi.advanceTimersByTime(SAVE_DELAY_MS);
      expect(new AgentBudgets({ file }).used("default/a", NOON)).toBe(1000);
      budgets.record("default/a", 5, NOON);
      budgets.flush();
      expect(new AgentBudgets({ file }).used("default/a", NOON)).toBe(1005);
    } finally {
      vi.useRealTimers();
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("lets an Agent without limits through, whatever it used", () => {
    const budgets = new AgentBudgets();
    budgets.record("default/a", 10_000_000, NOON);
    expect(budgets.admit("default/a", undefined, NOON)).toEqual({ ok: true });
    expect(budgets.admit("default/a", {}, NOON)).toEqual({ ok: true });
  });

  it("refuses once the day's tokens are used, in words, until 00:00 UTC", () => {
    const budgets = new AgentBudgets();
    const limits = { tokensPerDay: 1000 };
    budgets.record("default/a", 999, NOON);
    expect(budgets.admit("default/a", limits, NOON)).toEqual({ ok: true });
    budgets.record("default/a", 1, NOON);
    const refused = budgets.admit("default/a", limits, NOON);
    expect(refused).toEqual({
      ok: false,
      reason: "TokenBudgetExceeded",
      message:
        "Agent default/a has used 1,000 of its 1,000 model tokens for today (UTC); the budget resets at 00:00 UTC, in 12 h 0 min.",
      retryAfterSeconds: 12 * 3600,
    });
    // Another Agent has its own day; the next UTC day starts at zero.
    expect(budgets.admit("default/b", limits, NOON)).toEqual({ ok: true });
    expect(budgets.admit("default/a", limits, Date.parse("2026-12-06T00:00:00Z"))).toEqual({ ok: true });
    expect(budgets.used("default/a", Date.parse("2026-12-06T00:00:00Z"))).toBe(0);
  });

  it("takes one call a time from requestsPerMinute and says when the next one may go", () => {
    const budgets = new AgentBudgets();
    const limits = { requestsPerMinute: 2 };
    expect(budgets.admit("default/a", limits, NOON).ok).toBe(true);
    expect(budgets.admit("default/a", limits, NOON).ok).toBe(true);
    expect(budgets.admit("default/a", limits, NOON)).toEqual({
      ok: false,
      reason: "RequestRateExceeded",
      message: "Agent default/a may make 2 model calls a minute and has made them; try again in 30 s.",
      retryAfterSeconds: 30,
    });
    expect(budgets.admit("default/a", limits, NOON + 30_000).ok).toBe(true);
  });

  it("a token budget refusal takes nothing from the rate", () => {
    const budgets = new AgentBudgets();
    budgets.record("default/a", 5, NOON);
    expect(budgets.admit("default/a", { tokensPerDay: 5, requestsPerMinute: 1 }, NOON).ok).toBe(false);
    expect(budgets.admit("default/a", { requestsPerMinute: 1 }, NOON).ok).toBe(true);
  });
});
