import { describe, expect, it } from "vitest";
import { BinaryKind, decodeBinaryFrame, encodeBinaryFrame } from "./runner-binary.ts";
import { WORKSPACE_CHUNK_BYTES } from "./workspace-files.ts";

describe("binary frames of the runner link (PROTOCOL.md §9)", () => {
  it("carry a relay chunk's id, done flag and bytes, and command data, unchanged", () => {
    const data = Buffer.from([0, 1, 2, 255, 254]);
    const chunk = decodeBinaryFrame(encodeBinaryFrame(BinaryKind.relayChunk, "relay-1_a", data, true));
    expect(chunk).toEqual({ ok: true, frame: { kind: 1, id: "relay-1_a", done: true, data } });
    const piece = decodeBinaryFrame(encodeBinaryFrame(BinaryKind.commandData, "cmd", Buffer.alloc(0)));
    expect(piece).toEqual({ ok: true, frame: { kind: 2, id: "cmd", done: false, data: Buffer.alloc(0) } });
  });

  it("are one buffer of their own, which a worker port may transfer", () => {
    const frame = encodeBinaryFrame(BinaryKind.relayChunk, "r", Buffer.from("x"));
    expect(frame.byteOffset).toBe(0);
    expect(frame.buffer.byteLength).toBe(frame.length);
  });

  it("refuse each malformed header, naming what is wrong", () => {
    const good = encodeBinaryFrame(BinaryKind.relayChunk, "abc", Buffer.from("data"));
    const with_ = (at: number, value: number) => {
      const copy = Buffer.from(good);
      copy[at] = value;
      return copy;
    };
    const cases: [Uint8Array, RegExp][] = [
      [Buffer.from([1, 1, 0]), /shorter than a header/],
      [with_(0, 2), /version 2/],
      [with_(1, 9), /unknown kind 9/],
      [with_(2, 4), /unknown flags 4/],
      [with_(3, 0), /id length 0/],
      [with_(3, 65), /id length 65/],
      [with_(3, 200), /id length 200/],
      [with_(4, 0x2f), /id is not/],
      [Buffer.from([1, 1, 0, 10, 0x61]), /cut short inside its id/],
      [Buffer.concat([Buffer.from([1, 2, 1, 1, 0x61])]), /command data carries no flags/],
    ];
    for (const [bytes, reason] of cases) {
      const parsed = decodeBinaryFrame(bytes);
      expect(parsed.ok, reason.source).toBe(false);
      if (!parsed.ok) expect(parsed.reason).toMatch(reason);
    }
    const tooMuch = Buffer.concat([good.subarray(0, 7), Buffer.alloc(WORKSPACE_CHUNK_BYTES + 1)]);
    expect(decodeBinaryFrame(tooMuch)).toMatchObject({
      ok: false,
      reason: expect.stringMatching(/more than/),
    });
  });

  it("are never made with an id or data a receiver would refuse", () => {
    expect(() => encodeBinaryFrame(BinaryKind.relayChunk, "", Buffer.alloc(0))).toThrow(/id/);
    expect(() => encodeBinaryFrame(BinaryKind.relayChunk, "a/b", Buffer.alloc(0))).toThrow(/id/);
    expect(() => encodeBinaryFrame(BinaryKind.relayChunk, "x".repeat(65), Buffer.alloc(0))).toThrow(/id/);
    expect(() =>
      encodeBinaryFrame(BinaryKind.relayChunk, "r", Buffer.alloc(WORKSPACE_CHUNK_BYTES + 1)),
    ).toThrow(/at most/);
  });
});
