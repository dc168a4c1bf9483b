import { describe, expect, it } from "vitest";
import { IdleTimeout, MAX_IDLE_TIMEOUT_MS, parseDuration } from "./duration.ts";

describe("duration parsing", () => {
  it.each([
    ["0", 0],
    ["5s", 5_000],
    ["250ms", 250],
    ["15m", 900_000],
    ["1h30m", 5_400_000],
    ["2h", 7_200_000],
    ["1m30s500ms", 90_500],
  ])("reads %s as %i ms", (text, ms) => {
    expect(parseDuration(text)).toBe(ms);
  });

  it.each(["", "5", "-5s", "1.5h", "5 s", "5d", "s", "1h 30m", "5S", "00x"])(
    "refuses %j instead of guessing",
    (text) => {
      expect(parseDuration(text)).toBeUndefined();
    },
  );

  it("bounds idle timeouts to 30 days and explains the format", () => {
    expect(IdleTimeout.safeParse("720h").success).toBe(true);
    expect(parseDuration("720h")).toBe(MAX_IDLE_TIMEOUT_MS);
    const tooLong = IdleTimeout.safeParse("721h");
    expect(tooLong.success).toBe(false);
    expect(IdleTimeout.safeParse("soon").error?.issues[0]?.message).toMatch(/30s, 15m or 1h30m/);
  });
});
