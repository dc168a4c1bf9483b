import { describe, expect, it } from "vitest";
import { LineSplitter, MAX_FRAME_LINE_BYTES, parseAgentLine } from "./compass.ts";

describe("compass.v1 line parser", () => {
  it("accepts a well-formed agent frame and defaults its payload", () => {
    const parsed = parseAgentLine('{"protocol":"compass.v1","type":"log"}');
    expect(parsed).toEqual({ ok: true, frame: { protocol: "compass.v1", type: "log", payload: {} } });
  });

  it.each([
    ["not json", "not JSON"],
    ['{"protocol":"compass.v0","type":"log"}', "not a compass.v1 frame"],
    ['{"protocol":"compass.v1","type":"shout"}', "not a compass.v1 frame"],
    ["[]", "not a compass.v1 frame"],
  ])("turns %s into a value naming the problem, never a throw", (line, reason) => {
    const parsed = parseAgentLine(line);
    expect(parsed.ok).toBe(false);
    if (!parsed.ok) expect(parsed.reason).toContain(reason);
  });

  it("rejects a line longer than the bound", () => {
    expect(parseAgentLine("x".repeat(MAX_FRAME_LINE_BYTES + 1))).toMatchObject({ ok: false });
  });

  it("splits chunks into lines and keeps the unfinished tail", () => {
    const s = new LineSplitter();
    expect(s.push('{"a":1}\n{"b"')).toEqual(['{"a":1}']);
    expect(s.push(":2}\n\n")).toEqual(['{"b":2}']);
    expect(s.flush()).toEqual([]);
  });
});
