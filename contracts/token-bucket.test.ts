import { describe, expect, it } from "vitest";
import { TokenBucket } from "./token-bucket.ts";

describe("TokenBucket", () => {
  it("starts full, so a burst up to its size passes at once", () => {
    const b = new TokenBucket(10, 20, 0);
    expect(b.take(20, 0)).toBe(0);
    expect(b.tokens(0)).toBe(0);
  });

  it("says how long to wait to pay back a debt at its rate", () => {
    const b = new TokenBucket(100, 100, 0);
    expect(b.take(150, 0)).toBe(500); // 50 tokens short at 100/s
    expect(b.take(0, 500)).toBe(0);
    expect(b.tokens(500)).toBeCloseTo(0);
  });

  it("refills at its rate up to its burst, never beyond", () => {
    const b = new TokenBucket(10, 5, 0);
    b.take(5, 0);
    expect(b.tokens(200)).toBeCloseTo(2);
    expect(b.tokens(60_000)).toBe(5);
    expect(b.full(60_000)).toBe(true);
  });

  it("tryTake takes nothing when the tokens are not there", () => {
    const b = new TokenBucket(1, 2, 0);
    expect(b.tryTake(2, 0)).toBe(true);
    expect(b.tryTake(1, 0)).toBe(false);
    expect(b.tokens(0)).toBe(0);
    expect(b.tryTake(1, 1000)).toBe(true);
  });

  it("does not go back in time when the clock does", () => {
    const b = new TokenBucket(10, 10, 1000);
    b.take(10, 1000);
    expect(b.tokens(0)).toBe(0);
  });

  it("refuses a non-positive rate or burst", () => {
    expect(() => new TokenBucket(0, 1, 0)).toThrow(RangeError);
    expect(() => new TokenBucket(1, 0, 0)).toThrow(RangeError);
  });
});
