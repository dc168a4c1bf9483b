import { PassThrough } from "node:stream";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { AgentStdout, type OutputLimits } from "./agent-stdout.ts";

const roomy: OutputLimits = { maxLineBytes: 1024, bytesPerSecond: 1e9, framesPerSecond: 1e9 };

function sink(limits: Partial<OutputLimits> = {}, congested = () => false) {
  const lines: string[] = [];
  const overlong: number[] = [];
  const stdout = new AgentStdout({
    limits: { ...roomy, ...limits },
    onLine: (line) => lines.push(line),
    onOverlong: (limit) => overlong.push(limit),
    congested: () => congested(),
  });
  return { stdout, lines, overlong };
}

/** Resolves true when the write's callback has run. */
function written(stdout: AgentStdout, chunk: string): { done: () => boolean } {
  let done = false;
  stdout.write(chunk, () => {
    done = true;
  });
  return { done: () => done };
}

const frameLines = (n: number, from = 0) =>
  Array.from(
    { length: n },
    (_, i) => `{"protocol":"compass.v1","type":"log","payload":{"i":${from + i}}}\n`,
  ).join("");

beforeEach(() => {
  vi.useFakeTimers();
});
afterEach(() => {
  vi.useRealTimers();
});

describe("an agent's stdout sink", () => {
  it("hands over each complete line, the unfinished last one when stdout ends", async () => {
    const { stdout, lines } = sink();
    stdout.write('{"a":1}\n{"b"');
    stdout.end(":2}");
    await vi.runAllTimersAsync();
    expect(lines).toEqual(['{"a":1}', '{"b":2}']);
  });

  it("drops a line longer than the bound with one notice and keeps going with the next line", async () => {
    const { stdout, lines, overlong } = sink({ maxLineBytes: 100 });
    for (let i = 0; i < 50; i++) stdout.write("x".repeat(1000));
    stdout.write("\nafter\n");
    await vi.runAllTimersAsync();
    expect(overlong).toEqual([100]);
    expect(lines).toEqual(["after"]);
  });

  it("holds an agent over its frame budget until the budget refills (throttled, nothing dropped)", async () => {
    const { stdout, lines } = sink({ framesPerSecond: 10 });
    // 25 frames at once against 10 a second with a burst of 10: 15 in debt = 1.5 s.
    const w = written(stdout, frameLines(25));
    await vi.advanceTimersByTimeAsync(1_400);
    expect(w.done()).toBe(false);
    await vi.advanceTimersByTimeAsync(200);
    expect(w.done()).toBe(true);
    expect(lines).toHaveLength(25);
  });

  it("holds an agent over its byte budget, newline or not", async () => {
    const { stdout } = sink({ bytesPerSecond: 1_000, maxLineBytes: 100 });
    const first = written(stdout, "y".repeat(1_000)); // the burst
    await vi.advanceTimersByTimeAsync(0);
    expect(first.done()).toBe(true);
    const second = written(stdout, "y".repeat(2_000)); // 2 s of budget
    await vi.advanceTimersByTimeAsync(1_900);
    expect(second.done()).toBe(false);
    await vi.advanceTimersByTimeAsync(200);
    expect(second.done()).toBe(true);
  });

  it("takes no more while the way to the server is congested, and resumes once it drains", async () => {
    let congested = true;
    const { stdout, lines } = sink({}, () => congested);
    const w = written(stdout, frameLines(1));
    await vi.advanceTimersByTimeAsync(5_000);
    expect(lines).toHaveLength(1); // what was read is handed over; the next read waits
    expect(w.done()).toBe(false);
    congested = false;
    await vi.advanceTimersByTimeAsync(50);
    expect(w.done()).toBe(true);
  });

  it("backs up into the stream piped into it: the source stops being drained while the agent is throttled", async () => {
    const { stdout, lines } = sink({ framesPerSecond: 100 });
    const source = new PassThrough();
    source.pipe(stdout);
    let accepted = 0;
    // An agent writing 10,000 frames as fast as the stream takes them.
    while (accepted < 10_000 && source.write(frameLines(100, accepted))) accepted += 100;
    await vi.advanceTimersByTimeAsync(0);
    expect(source.writableNeedDrain).toBe(true);
    const handed = lines.length;
    expect(handed).toBeLessThan(10_000);
    // A second later it has taken about one second's budget more, not everything.
    await vi.advanceTimersByTimeAsync(1_000);
    expect(lines.length - handed).toBeLessThanOrEqual(400);
  });
});
