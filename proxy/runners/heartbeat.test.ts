import { describe, expect, it } from "vitest";
import { missedHeartbeats } from "./heartbeat.ts";

describe("missed heartbeats (PROTOCOL.md §4)", () => {
  it("counts whole intervals since the runner last spoke", () => {
    expect(missedHeartbeats(1_000, 1_000, 100)).toBe(0);
    expect(missedHeartbeats(1_000, 1_199, 100)).toBe(1);
    expect(missedHeartbeats(1_000, 1_200, 100)).toBe(2);
    expect(missedHeartbeats(1_000, 900, 100)).toBe(0);
  });
});
