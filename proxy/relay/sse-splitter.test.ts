import { describe, expect, it } from "vitest";
import { SseSplitter } from "./sse-splitter.ts";

describe("SSE splitter", () => {
  it("yields the data of complete events only, across arbitrary chunk boundaries", () => {
    const s = new SseSplitter();
    expect(s.push('data: {"type":"delta","text":"a"}\n\ndata: {"ty')).toEqual([
      '{"type":"delta","text":"a"}',
    ]);
    expect(s.pending).toBeGreaterThan(0);
    expect(s.push('pe":"delta","text":"b"}\n')).toEqual([]);
    expect(s.push("\n")).toEqual(['{"type":"delta","text":"b"}']);
  });

  it("joins multi-line data, drops comments and other fields, and accepts CRLF", () => {
    const s = new SseSplitter();
    expect(s.push(": keep-alive\r\n\r\nevent: x\r\nid: 3\r\ndata: one\r\ndata:two\r\n\r\n")).toEqual([
      "one\ntwo",
    ]);
  });
});
