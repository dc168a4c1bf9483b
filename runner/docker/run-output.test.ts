import { describe, expect, it } from "vitest";
import { RunOutput } from "./run-output.ts";

/** One frame of Docker's multiplexed log stream: stream 1 = stdout, 2 = stderr. */
function frame(text: string, stream = 1): Buffer {
  const body = Buffer.from(text);
  const header = Buffer.alloc(8);
  header[0] = stream;
  header.writeUInt32BE(body.length, 4);
  return Buffer.concat([header, body]);
}

/** Feed `bytes` in pieces of `size`, so headers and bodies are split anywhere. */
function feed(output: RunOutput, bytes: Buffer, size: number): void {
  for (let i = 0; i < bytes.length; i += size) output.push(bytes.subarray(i, i + size));
}

describe("a one-shot run's output", () => {
  it("is its stdout, whatever the chunking of the log stream; stderr is left out", () => {
    const log = Buffer.concat([frame("starting\n"), frame("noise\n", 2), frame('{"id":"r"}\n')]);
    for (const size of [1, 3, 7, 8, 9, log.length]) {
      const output = new RunOutput(1024);
      feed(output, log, size);
      expect(output.result()).toEqual({ text: 'starting\n{"id":"r"}\n', droppedBytes: 0 });
    }
  });

  it("keeps only the last maxBytes of a long one, from a line start, and says how much was dropped", () => {
    const output = new RunOutput(1000);
    const lines = Array.from({ length: 5000 }, (_, i) => `line ${i}\n`);
    for (const line of lines) output.push(frame(line));
    expect(output.retainedBytes).toBeLessThanOrEqual(1000 + 16);
    const { text, droppedBytes } = output.result();
    expect(text.endsWith("line 4999\n")).toBe(true);
    expect(text.startsWith("line ")).toBe(true);
    expect(Buffer.byteLength(text)).toBeLessThanOrEqual(1000);
    expect(droppedBytes + Buffer.byteLength(text)).toBe(Buffer.byteLength(lines.join("")));
    // The result record (the last line) survives any amount before it.
    expect(text.trim().split("\n").pop()).toBe("line 4999");
  });

  it("holds no more than its bound while a single huge frame streams through", () => {
    const output = new RunOutput(4096);
    const body = Buffer.alloc(50 * 1024 * 1024, "x");
    const header = Buffer.alloc(8);
    header[0] = 1;
    header.writeUInt32BE(body.length + 4, 4);
    output.push(header);
    let peak = 0;
    for (let i = 0; i < body.length; i += 64 * 1024) {
      output.push(body.subarray(i, i + 64 * 1024));
      peak = Math.max(peak, output.retainedBytes);
    }
    output.push(Buffer.from("\nok\n"));
    expect(peak).toBeLessThanOrEqual(4096 + 64 * 1024);
    expect(output.result().text).toBe("ok\n");
  });
});
