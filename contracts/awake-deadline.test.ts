import { describe, expect, it } from "vitest";
import { AwakeDeadline, stalledTick } from "./awake-deadline.ts";

/** A clock the test moves by hand. */
function clock() {
  let t = 1_000;
  return { now: () => t, advance: (ms: number) => (t += ms) };
}

describe("a deadline that counts running time only", () => {
  it("passes after its time when checked at a steady pace", () => {
    const c = clock();
    const d = new AwakeDeadline(1_000, { now: c.now, maxStepMs: 500 });
    for (let i = 0; i < 9; i++) {
      c.advance(100);
      expect(d.passed()).toBe(false);
    }
    expect(d.remainingMs).toBe(100);
    c.advance(100);
    expect(d.passed()).toBe(true);
  });

  it("credits a pause as one step at most: a 60 s stop does not end a 30 s wait", () => {
    const c = clock();
    const d = new AwakeDeadline(30_000, { now: c.now, maxStepMs: 5_000 });
    c.advance(1_000);
    expect(d.passed()).toBe(false);
    c.advance(60_000); // the machine stopped
    expect(d.passed()).toBe(false);
    expect(d.remainingMs).toBe(24_000);
    for (let i = 0; i < 23; i++) {
      c.advance(1_000);
      expect(d.passed()).toBe(false);
    }
    c.advance(1_000);
    expect(d.passed()).toBe(true);
  });

  it("ignores a clock that steps back", () => {
    const c = clock();
    const d = new AwakeDeadline(100, { now: c.now });
    c.advance(-50_000);
    expect(d.passed()).toBe(false);
    expect(d.remainingMs).toBe(100);
  });
});

describe("a periodic tick's stall", () => {
  it("is how late the tick ran once it is more than an interval late, else nothing", () => {
    expect(stalledTick(0, 1_000, 1_000)).toBe(0);
    expect(stalledTick(0, 1_900, 1_000)).toBe(0); // late, but within an interval: a busy loop
    expect(stalledTick(0, 2_000, 1_000)).toBe(0);
    expect(stalledTick(0, 63_000, 1_000)).toBe(62_000);
  });
});
