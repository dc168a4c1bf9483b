import { setImmediate as nextTurn } from "node:timers/promises";
import { describe, expect, it } from "vitest";
import { inProcessLink, type LinkChannel } from "./runner-channel.ts";

function collect(end: LinkChannel): string[] {
  const got: string[] = [];
  end.onMessage((text) => got.push(text as string));
  return got;
}

describe("the in-process runner link", () => {
  it("carries messages both ways, in order, never within the sender's call", async () => {
    const { runner, server } = inProcessLink();
    const atServer = collect(server);
    const atRunner = collect(runner);
    runner.send("hello");
    runner.send("frame 1");
    server.send("welcome");
    expect(atServer).toEqual([]);
    expect(atRunner).toEqual([]);
    await nextTurn();
    expect(atServer).toEqual(["hello", "frame 1"]);
    expect(atRunner).toEqual(["welcome"]);
  });

  it("hands binary frames over as they are, in order with envelopes, counted in bytes (PROTOCOL.md §9)", async () => {
    const { runner, server } = inProcessLink();
    const got: (string | Uint8Array)[] = [];
    server.onMessage((m) => got.push(m));
    const frame = Buffer.from([1, 1, 0, 1, 0x61, 9, 9]);
    runner.send("before");
    runner.send(frame);
    runner.send("after");
    expect(runner.bufferedAmount).toBe(6 + 7 + 5);
    await nextTurn();
    expect(got).toEqual(["before", frame, "after"]);
    expect(got[1]).toBe(frame);
    expect(runner.bufferedAmount).toBe(0);
  });

  it("counts what the peer has not taken in the sender's bufferedAmount, in bytes", async () => {
    const { runner, server } = inProcessLink();
    collect(server);
    runner.send("é"); // 2 bytes in UTF-8
    runner.send("abc");
    expect(runner.bufferedAmount).toBe(5);
    expect(server.bufferedAmount).toBe(0);
    await nextTurn();
    expect(runner.bufferedAmount).toBe(0);
  });

  it("holds messages while the receiver is paused (the sender's backlog grows) and hands them over on resume", async () => {
    const { runner, server } = inProcessLink();
    const atServer = collect(server);
    server.pause();
    expect(server.isPaused).toBe(true);
    for (let i = 0; i < 3000; i++) runner.send(`frame ${i}`);
    await nextTurn();
    await nextTurn();
    expect(atServer).toEqual([]);
    expect(runner.bufferedAmount).toBeGreaterThan(3000 * 7);
    server.resume();
    await nextTurn();
    expect(atServer).toHaveLength(3000);
    expect(atServer[2999]).toBe("frame 2999");
    expect(runner.bufferedAmount).toBe(0);
  });

  it("stops handing over as soon as the receiver pauses mid-batch", async () => {
    const { runner, server } = inProcessLink();
    const atServer: string[] = [];
    server.onMessage((text) => {
      atServer.push(text as string);
      if (atServer.length === 2) server.pause();
    });
    for (const m of ["a", "b", "c", "d"]) runner.send(m);
    await nextTurn();
    expect(atServer).toEqual(["a", "b"]);
    expect(runner.bufferedAmount).toBe(2);
    server.resume();
    await nextTurn();
    expect(atServer).toEqual(["a", "b", "c", "d"]);
  });

  it("closes both ends with the closer's code and reason, after what was sent before", async () => {
    const { runner, server } = inProcessLink();
    const atServer = collect(server);
    const closes: string[] = [];
    runner.onClose((code, reason) => closes.push(`runner ${code} ${reason}`));
    server.onClose((code, reason) => closes.push(`server ${code} ${reason}`));
    runner.send("last words");
    server.close(4000, "superseded");
    expect(runner.open).toBe(false);
    expect(server.open).toBe(false);
    runner.send("too late");
    await nextTurn();
    expect(atServer).toEqual(["last words"]);
    expect(closes).toEqual(["runner 4000 superseded", "server 4000 superseded"]);
    // Once only.
    runner.close(1000, "again");
    await nextTurn();
    expect(closes).toHaveLength(2);
    expect(runner.bufferedAmount).toBe(0);
  });

  it("loses what a paused receiver had not taken when the link closes", async () => {
    const { runner, server } = inProcessLink();
    const atServer = collect(server);
    server.pause();
    runner.send("never read");
    runner.close(1000, "bye");
    await nextTurn();
    server.resume();
    await nextTurn();
    expect(atServer).toEqual([]);
    expect(runner.bufferedAmount).toBe(0);
  });
});
