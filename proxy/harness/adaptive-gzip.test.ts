import { randomBytes } from "node:crypto";
import { buffer } from "node:stream/consumers";
import { gunzipSync } from "node:zlib";
import { describe, expect, it } from "vitest";
import { adaptiveGzip, entropyBits } from "./adaptive-gzip.ts";

describe("the export's adaptive gzip", () => {
  it("tells random bytes from text", () => {
    expect(entropyBits(randomBytes(4096))).toBeGreaterThan(7.5);
    expect(
      entropyBits(Buffer.from("the quick brown fox jumps over the lazy dog\n".repeat(100))),
    ).toBeLessThan(5);
    expect(entropyBits(Buffer.alloc(0))).toBe(0);
  });

  it("is one gzip any gunzip reads back whole, text compressed and random stored", async () => {
    const text = Buffer.from("the quick brown fox jumps over the lazy dog 0123456789\n".repeat(20_000));
    const random = randomBytes(1_100_000);
    const pieces = [text.subarray(0, 500_000), random, text.subarray(500_000), Buffer.from("tail")];
    const z = adaptiveGzip();
    const out = buffer(z.stream);
    for (const p of pieces) z.write(p);
    z.end();
    const gz = await out;
    const whole = Buffer.concat(pieces);
    expect(gunzipSync(gz).equals(whole)).toBe(true);
    // The text shrank; the random bytes were stored (a few bytes of block headers on top).
    expect(gz.length).toBeLessThan(random.length + text.length / 10);
    expect(gz.length).toBeGreaterThan(random.length);
  });

  it("stores random bytes and compresses text (a gzip any gunzip reads, also with only one kind)", async () => {
    for (const data of [randomBytes(300_000), Buffer.from("abc\n".repeat(100_000)), Buffer.alloc(0)]) {
      const z = adaptiveGzip();
      const out = buffer(z.stream);
      z.write(data);
      z.end();
      expect(gunzipSync(await out).equals(data)).toBe(true);
    }
  });

  it("ends with the error given", async () => {
    const z = adaptiveGzip();
    z.write(Buffer.from("x"));
    z.end(new Error("the runner failed"));
    await expect(buffer(z.stream)).rejects.toThrow(/the runner failed/);
  });
});
