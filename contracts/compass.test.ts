import { describe, expect, it } from "vitest";
import {
  AgentFrame,
  FORGED_STATUS_REASON,
  LineSplitter,
  MAX_FRAME_LINE_BYTES,
  parseAgentLine,
  type SplitItem,
} from "./compass.ts";

const lines = (items: SplitItem[]) => items.map((i) => (i.kind === "line" ? i.line : `<${i.kind}>`));

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

  it("refuses a status frame from an agent: status frames come only from the server", () => {
    expect(parseAgentLine('{"protocol":"compass.v1","type":"status","payload":{"state":"STOPPED"}}')).toEqual(
      {
        ok: false,
        reason: FORGED_STATUS_REASON,
      },
    );
    // The schema the server validates runner frames with refuses it too.
    expect(AgentFrame.safeParse({ protocol: "compass.v1", type: "status", payload: {} }).success).toBe(false);
  });

  it("rejects a line longer than the bound", () => {
    expect(parseAgentLine("x".repeat(MAX_FRAME_LINE_BYTES + 1))).toMatchObject({ ok: false });
  });
});

describe("LineSplitter", () => {
  it("splits chunks into lines and keeps the unfinished tail", () => {
    const s = new LineSplitter();
    expect(lines(s.push('{"a":1}\n{"b"'))).toEqual(['{"a":1}']);
    expect(lines(s.push(":2}\n\n"))).toEqual(['{"b":2}']);
    expect(s.flush()).toEqual([]);
  });

  it("keeps a UTF-8 character split across two chunks whole", () => {
    const s = new LineSplitter();
    const bytes = new TextEncoder().encode("é€\n");
    expect(s.push(bytes.subarray(0, 3))).toEqual([]);
    expect(lines(s.push(bytes.subarray(3)))).toEqual(["é€"]);
  });

  it("keeps a byte-order mark that starts a later line (a character there), drops only the stream's first", () => {
    const s = new LineSplitter();
    const lines = [...s.push("\uFEFF{}\n\uFEFF\u0000\n"), ...s.flush()];
    expect(lines).toEqual([
      { kind: "line", line: "{}" },
      { kind: "line", line: "\uFEFF\u0000" },
    ]);
  });

  it("drops a line that outgrows the bound: one overlong notice, its bytes discarded up to its newline, the next line intact", () => {
    const s = new LineSplitter(10);
    expect(lines(s.push("12345678"))).toEqual([]);
    expect(lines(s.push("90ab"))).toEqual(["<overlong>"]);
    expect(s.pendingBytes).toBe(0);
    expect(lines(s.push("x".repeat(1000)))).toEqual([]);
    expect(s.pendingBytes).toBe(0);
    expect(lines(s.push("tail\nnext\n"))).toEqual(["next"]);
    expect(s.flush()).toEqual([]);
  });

  it("accepts a line of exactly the bound", () => {
    const s = new LineSplitter(4);
    expect(lines(s.push("abcd\nabcde\n"))).toEqual(["abcd", "<overlong>"]);
  });

  it("holds no more than the bound of an endless line, however it is chunked", () => {
    const s = new LineSplitter(1024);
    let notices = 0;
    for (let i = 0; i < 10_000; i++) {
      notices += s.push("y".repeat(97)).length;
      expect(s.pendingBytes).toBeLessThanOrEqual(1024);
    }
    expect(notices).toBe(1);
    expect(s.flush()).toEqual([]);
  });
});
