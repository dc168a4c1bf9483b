import { describe, expect, it } from "vitest";
import { FrameBudget } from "./frame-budget.ts";

describe("the server's per-session frame budget", () => {
  it("admits a burst, then drops with one notice per spell, and admits again once refilled", () => {
    const budget = new FrameBudget({ framesPerSecond: 10, bytesPerSecond: 1e9, burstSeconds: 2 });
    const admitted = Array.from({ length: 20 }, () => budget.admit("s1", 100, 0));
    expect(admitted.every((a) => a === "admit")).toBe(true);
    expect(budget.admit("s1", 100, 0)).toBe("notice");
    expect(budget.admit("s1", 100, 50)).toBe("drop");
    expect(budget.admit("s1", 100, 99)).toBe("drop");
    // 100 ms later one frame's worth is back.
    expect(budget.admit("s1", 100, 100)).toBe("admit");
    expect(budget.admit("s1", 100, 100)).toBe("notice"); // a new spell, a new notice
  });

  it("counts bytes as well as frames", () => {
    const budget = new FrameBudget({ framesPerSecond: 1e6, bytesPerSecond: 1000, burstSeconds: 1 });
    expect(budget.admit("s1", 1000, 0)).toBe("admit");
    expect(budget.admit("s1", 1, 0)).toBe("notice");
    expect(budget.admit("s1", 500, 500)).toBe("admit");
  });

  it("keeps sessions apart: one session's flood costs another nothing", () => {
    const budget = new FrameBudget({ framesPerSecond: 1, bytesPerSecond: 1e9, burstSeconds: 1 });
    expect(budget.admit("flood", 1, 0)).toBe("admit");
    expect(budget.admit("flood", 1, 0)).toBe("notice");
    expect(budget.admit("quiet", 1, 0)).toBe("admit");
  });

  it("at 4000 frames a second by default, 8000 at once", () => {
    const budget = new FrameBudget();
    let admitted = 0;
    for (let i = 0; i < 20_000; i++) if (budget.admit("s1", 200, 0) === "admit") admitted++;
    expect(admitted).toBe(8_000);
    for (let i = 0; i < 20_000; i++) if (budget.admit("s1", 200, 1_000) === "admit") admitted++;
    expect(admitted).toBe(12_000);
  });

  it("stays bounded in the sessions it remembers", () => {
    const budget = new FrameBudget();
    for (let i = 0; i < 25_000; i++) budget.admit(`s${i}`, 10, 0);
    expect(budget.size).toBeLessThanOrEqual(10_000);
  });

  it("says in its notice what the budget is", () => {
    expect(new FrameBudget({ framesPerSecond: 7, bytesPerSecond: 9 }).notice()).toEqual({
      type: "error",
      payload: {
        message: "frames dropped: the session's output exceeds the server's budget",
        frames_per_second: 7,
        bytes_per_second: 9,
      },
    });
  });
});
