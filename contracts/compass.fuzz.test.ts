import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { AgentFrameType, LineSplitter, MAX_FRAME_LINE_BYTES, parseAgentLine } from "./compass.ts";

// Property-based fuzzing of the compass.v1 frame parser (fast-check prints the seed and the
// shrunk counterexample of a failure; replay with `{ seed, path }` in fc.assert's options).

const RUNS = { lines: 3_000, roundTrip: 1_500, splitter: 1_000 };

const iso = fc
  .date({ min: new Date("1970-01-01T00:00:00Z"), max: new Date("2999-12-31T23:59:59Z"), noInvalidDate: true })
  .map((d) => d.toISOString());

/** A frame as an agent writes it, every field well-formed. */
const validFrame = fc.record(
  {
    protocol: fc.constant("compass.v1"),
    type: fc.constantFrom(...AgentFrameType.options),
    ts: iso,
    // A `__proto__` payload key is dropped by the parser (zod's record), so it is left out here;
    // the round trip of any accepted line still covers it.
    payload: fc.dictionary(
      fc.string({ unit: "grapheme" }).filter((key) => key !== "__proto__"),
      fc.jsonValue({ maxDepth: 3 }),
      { maxKeys: 5 },
    ),
  },
  { requiredKeys: ["protocol", "type"] },
);

/** Nested arrays/objects this deep, as JSON text (no recursion needed to build it). */
const deepJson = fc
  .tuple(fc.integer({ min: 1, max: 20_000 }), fc.boolean())
  .map(([depth, arrays]) =>
    arrays ? `${"[".repeat(depth)}${"]".repeat(depth)}` : `${'{"a":'.repeat(depth)}1${"}".repeat(depth)}`,
  );

/** A valid frame with one field broken: wrong type, wrong value, missing, or an extra key. */
const mutatedFrame = fc
  .tuple(validFrame, fc.constantFrom("protocol", "type", "ts", "payload", "seq", "__proto__"), fc.anything())
  .map(([frame, key, value]) => {
    const copy: Record<string, unknown> = { ...frame };
    if (value === undefined) delete copy[key];
    else Object.defineProperty(copy, key, { value, enumerable: true, writable: true, configurable: true });
    return copy;
  });

/** Any line an agent (or a broken agent) could print. */
const anyLine = fc.oneof(
  { arbitrary: validFrame.map((f) => JSON.stringify(f)), weight: 3 },
  { arbitrary: mutatedFrame.map((f) => JSON.stringify(f) ?? "undefined"), weight: 3 },
  { arbitrary: fc.json({ maxDepth: 4 }), weight: 2 },
  { arbitrary: fc.string({ unit: "binary", maxLength: 300 }), weight: 2 },
  { arbitrary: fc.string({ unit: "grapheme", maxLength: 300 }), weight: 1 },
  { arbitrary: deepJson, weight: 1 },
  // Around the length bound: a frame padded to just under, at and over MAX_FRAME_LINE_BYTES.
  {
    arbitrary: fc.integer({ min: -2, max: 2 }).map((delta) => {
      const frame = JSON.stringify({ protocol: "compass.v1", type: "log", payload: { pad: "" } });
      return frame.replace('"pad":""', `"pad":"${"x".repeat(MAX_FRAME_LINE_BYTES - frame.length + delta)}"`);
    }),
    weight: 1,
  },
  { arbitrary: validFrame.map((f) => JSON.stringify(f).slice(0, -1)), weight: 1 },
);

describe("compass.v1 frame parser (property-based)", () => {
  it(`never throws and accepts exactly the lines the schema allows (${RUNS.lines} lines)`, () => {
    fc.assert(
      fc.property(anyLine, (line) => {
        const parsed = parseAgentLine(line);
        expect(typeof parsed.ok).toBe("boolean");
        if (!parsed.ok) {
          expect(parsed.reason).toBeTypeOf("string");
          return;
        }
        expect(line.length).toBeLessThanOrEqual(MAX_FRAME_LINE_BYTES);
        expect(parsed.frame.protocol).toBe("compass.v1");
        expect(AgentFrameType.options).toContain(parsed.frame.type);
        expect(parsed.frame.payload).toBeTypeOf("object");
      }),
      { numRuns: RUNS.lines },
    );
  });

  it(`round-trips every line it accepts, and every well-formed frame (${RUNS.roundTrip} frames)`, () => {
    fc.assert(
      fc.property(anyLine, (line) => {
        const first = parseAgentLine(line);
        if (!first.ok) return;
        const again = parseAgentLine(JSON.stringify(first.frame));
        expect(again).toEqual(first);
        expect(JSON.stringify(again.ok && again.frame)).toBe(JSON.stringify(first.frame));
      }),
      { numRuns: RUNS.roundTrip },
    );
    fc.assert(
      fc.property(validFrame, (frame) => {
        const parsed = parseAgentLine(JSON.stringify(frame));
        expect(parsed).toEqual({ ok: true, frame: { payload: {}, ...JSON.parse(JSON.stringify(frame)) } });
      }),
      { numRuns: RUNS.roundTrip },
    );
  });

  it(`LineSplitter yields the same lines whatever the chunking (${RUNS.splitter} streams)`, () => {
    const text = fc
      .array(
        fc.oneof(
          anyLine.filter((l) => l.length < 2_000),
          fc.constantFrom("", " ", "\r", "\t"),
        ),
        {
          maxLength: 12,
        },
      )
      .map((lines) => lines.join("\n"));
    fc.assert(
      fc.property(text, fc.array(fc.nat(), { maxLength: 20 }), (stream, cuts) => {
        const bytes = new TextEncoder().encode(stream);
        const points = [...new Set(cuts.map((c) => c % (bytes.length + 1)))].sort((a, b) => a - b);
        const splitter = new LineSplitter();
        const got: string[] = [];
        const take = (items: ReturnType<LineSplitter["push"]>) => {
          for (const item of items) if (item.kind === "line") got.push(item.line);
        };
        let from = 0;
        // Cuts fall anywhere, inside a UTF-8 character too.
        for (const at of [...points, bytes.length]) {
          take(splitter.push(bytes.subarray(from, at)));
          from = at;
        }
        take(splitter.flush());
        const decoded = new TextDecoder().decode(bytes);
        expect(got).toEqual(decoded.split("\n").filter((l) => l.trim().length > 0));
        for (const line of got) parseAgentLine(line);
      }),
      { numRuns: RUNS.splitter },
    );
  });

  it("LineSplitter drops an endless line with one notice and never holds more than the bound", () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 64 * 1024 }), (size) => {
        const splitter = new LineSplitter();
        const chunk = "y".repeat(size);
        let notices = 0;
        for (let i = 0; i < Math.ceil((MAX_FRAME_LINE_BYTES * 1.5) / size) && i < 2_000; i++) {
          for (const item of splitter.push(chunk)) {
            expect(item.kind).toBe("overlong");
            notices++;
          }
          expect(splitter.pendingBytes).toBeLessThanOrEqual(MAX_FRAME_LINE_BYTES);
        }
        const total = size * Math.min(Math.ceil((MAX_FRAME_LINE_BYTES * 1.5) / size), 2_000);
        // Past the bound: dropped with one notice; within it (few, small chunks) still a line.
        expect(notices).toBe(total > MAX_FRAME_LINE_BYTES ? 1 : 0);
        expect(splitter.flush().map((i) => i.kind)).toEqual(total > MAX_FRAME_LINE_BYTES ? [] : ["line"]);
      }),
      { numRuns: 30 },
    );
  });
});
