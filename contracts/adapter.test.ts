import { describe, expect, it } from "vitest";
import { ResultRecord, Usage } from "./adapter.ts";

const record = (over: Record<string, unknown> = {}) => ({
  id: "req-1",
  outcome: "succeeded",
  output: "hi",
  usage: { input_tokens: 3, output_tokens: 5 },
  started_at: "2026-12-01T00:00:00.000Z",
  finished_at: "2026-12-01T00:00:01.000Z",
  ...over,
});

describe("what an adapter reports is checked", () => {
  it("accepts a well-formed result record", () => {
    expect(ResultRecord.safeParse(record()).success).toBe(true);
  });

  it.each([
    ["a request id with a newline (log injection)", { id: 'req-1\n{"msg":"forged"}' }],
    ["an overlong request id", { id: "r".repeat(129) }],
    ["an empty request id", { id: "" }],
    ["negative token counts", { usage: { input_tokens: -1, output_tokens: 5 } }],
    ["fractional token counts", { usage: { input_tokens: 1.5, output_tokens: 5 } }],
    ["absurd token counts", { usage: { input_tokens: 1e15, output_tokens: 5 } }],
    ["a fake zero", { usage: { input_tokens: 0 } }],
    ["an overlong error", { outcome: "failed", error: "e".repeat(16 * 1024 + 1) }],
    ["an overlong timestamp", { started_at: "2".repeat(65) }],
  ])("refuses %s", (_what, over) => {
    expect(ResultRecord.safeParse(record(over)).success).toBe(false);
  });

  it("keeps usage explicit: numbers or 'unavailable'", () => {
    expect(Usage.safeParse("unavailable").success).toBe(true);
    expect(Usage.safeParse({ input_tokens: 0, output_tokens: 0 }).success).toBe(true);
  });
});
