import { setImmediate as nextTurn } from "node:timers/promises";
import { MessageChannel, Worker } from "node:worker_threads";
import { afterEach, describe, expect, it } from "vitest";
import { CLOSED_ABNORMALLY, type LinkChannel } from "./runner-channel.ts";
import { portChannel } from "./runner-port-channel.ts";

const open: MessageChannel[] = [];
afterEach(() => {
  for (const c of open.splice(0)) {
    c.port1.close();
    c.port2.close();
  }
});

/** Two ends over one MessageChannel (here both on this thread; serve puts one in a worker). */
function link(): { runner: LinkChannel; server: LinkChannel } {
  const channel = new MessageChannel();
  open.push(channel);
  return { runner: portChannel(channel.port1), server: portChannel(channel.port2) };
}

function collect(end: LinkChannel): string[] {
  const got: string[] = [];
  end.onMessage((text) => got.push(text as string));
  return got;
}

/** Until `holds` (a port's message takes a turn or two, an acknowledgement a few ms); 2 s at most. */
async function settle(holds: () => boolean): Promise<void> {
  const deadline = Date.now() + 2_000;
  while (!holds() && Date.now() < deadline) await new Promise((r) => setTimeout(r, 1));
  expect(holds()).toBe(true);
}

describe("the runner link over a MessagePort", () => {
  it("carries messages both ways, in order, never within the sender's call", async () => {
    const { runner, server } = link();
    const atServer = collect(server);
    const atRunner = collect(runner);
    runner.send("hello");
    runner.send("frame 1");
    server.send("welcome");
    expect(atServer).toEqual([]);
    expect(atRunner).toEqual([]);
    for (let i = 0; i < 500; i++) runner.send(`frame ${i + 2}`);
    await settle(() => atServer.length === 502 && atRunner.length === 1);
    expect(atServer.slice(0, 3)).toEqual(["hello", "frame 1", "frame 2"]);
    expect(atServer[501]).toBe("frame 501");
    expect(atRunner).toEqual(["welcome"]);
  });

  it("carries binary frames between envelopes in order, moving a frame's own memory and copying a pooled one (PROTOCOL.md §9)", async () => {
    const { runner, server } = link();
    const got: (string | Uint8Array)[] = [];
    server.onMessage((m) => got.push(m));
    const owned = Buffer.allocUnsafeSlow(1000).fill(7);
    const pooled = Buffer.from("small, in Node's shared pool");
    expect(pooled.buffer.byteLength).toBeGreaterThan(pooled.length);
    runner.send("before");
    runner.send(owned);
    runner.send(pooled);
    runner.send("after");
    expect(runner.bufferedAmount).toBe(6 + 1000 + pooled.length + 5);
    await settle(() => got.length === 4);
    expect(got[0]).toBe("before");
    expect(Buffer.from(got[1] as Uint8Array).equals(Buffer.alloc(1000, 7))).toBe(true);
    expect(Buffer.from(got[2] as Uint8Array).toString()).toBe("small, in Node's shared pool");
    expect(got[3]).toBe("after");
    // Transferred: the sender no longer holds the frame's memory; the pool it shares is intact.
    expect(owned.buffer.byteLength).toBe(0);
    expect(pooled.toString()).toBe("small, in Node's shared pool");
    await settle(() => runner.bufferedAmount === 0);
  });

  it("counts what the peer has not taken in the sender's bufferedAmount, in bytes, until the peer takes it", async () => {
    const { runner, server } = link();
    const atServer = collect(server);
    runner.send("é"); // 2 bytes in UTF-8
    runner.send("abc");
    expect(runner.bufferedAmount).toBe(5);
    expect(server.bufferedAmount).toBe(0);
    await settle(() => atServer.length === 2);
    await settle(() => runner.bufferedAmount === 0);
  });

  it("holds messages while the receiver is paused (the sender's backlog grows) and hands them over on resume", async () => {
    const { runner, server } = link();
    const atServer = collect(server);
    server.pause();
    expect(server.isPaused).toBe(true);
    for (let i = 0; i < 3000; i++) runner.send(`frame ${i}`);
    for (let i = 0; i < 20; i++) await nextTurn();
    expect(atServer).toEqual([]);
    expect(runner.bufferedAmount).toBeGreaterThan(3000 * 7);
    server.resume();
    expect(atServer).toEqual([]); // not within resume's call either
    await settle(() => atServer.length === 3000 && runner.bufferedAmount === 0);
    expect(atServer[2999]).toBe("frame 2999");
  });

  it("stops handing over as soon as the receiver pauses mid-batch; the rest stays in the sender's count", async () => {
    const { runner, server } = link();
    const atServer: string[] = [];
    server.onMessage((text) => {
      atServer.push(text as string);
      if (atServer.length === 2) server.pause();
    });
    for (const m of ["a", "b", "c", "d"]) runner.send(m);
    await settle(() => atServer.length === 2 && runner.bufferedAmount === 2);
    for (let i = 0; i < 10; i++) await nextTurn();
    expect(atServer).toEqual(["a", "b"]);
    server.resume();
    await settle(() => atServer.length === 4 && runner.bufferedAmount === 0);
    expect(atServer).toEqual(["a", "b", "c", "d"]);
  });

  it.each([
    ["the server", "server"],
    ["the runner", "runner"],
  ] as const)("closes both ends with %s's code and reason, after what was sent before", async (_, closer) => {
    const ends = link();
    const { runner, server } = ends;
    const atServer = collect(server);
    const closes: string[] = [];
    runner.onClose((code, reason) => closes.push(`runner ${code} ${reason}`));
    server.onClose((code, reason) => closes.push(`server ${code} ${reason}`));
    runner.send("last words");
    ends[closer].close(4000, "superseded");
    expect(ends[closer].open).toBe(false);
    ends[closer].send("too late");
    await settle(() => closes.length === 2);
    expect(atServer).toEqual(["last words"]);
    expect(closes.sort()).toEqual(["runner 4000 superseded", "server 4000 superseded"]);
    expect(runner.open || server.open).toBe(false);
    // Once only.
    runner.close(1000, "again");
    server.close(1000, "again");
    for (let i = 0; i < 10; i++) await nextTurn();
    expect(closes).toHaveLength(2);
    expect(runner.bufferedAmount).toBe(0);
  });

  it("holds what arrives before a listener is set (the end is made before its user attaches)", async () => {
    const { runner, server } = link();
    runner.send("early");
    for (let i = 0; i < 10; i++) await nextTurn();
    const atServer = collect(server);
    await settle(() => atServer.length === 1);
    expect(atServer).toEqual(["early"]);
  });

  it("closes with 1006 when the peer's thread ends without closing (a worker that died)", async () => {
    const channel = new MessageChannel();
    const server = portChannel(channel.port1);
    const atServer = collect(server);
    const closed = new Promise<[number, string]>((resolve) =>
      server.onClose((code, reason) => resolve([code, reason])),
    );
    // The worker says one thing on the link, the way portChannel frames it, and dies.
    const worker = new Worker(
      `const { parentPort } = require("node:worker_threads");
       parentPort.once("message", ({ port }) => {
         port.postMessage({ k: "m", texts: ["hello"], sizes: [5], ack: 0 });
         setTimeout(() => process.exit(1), 20);
       });`,
      { eval: true },
    );
    worker.postMessage({ port: channel.port2 }, [channel.port2]);
    server.send("you there?");
    expect(await closed).toEqual([CLOSED_ABNORMALLY, ""]);
    expect(atServer).toEqual(["hello"]);
    expect(server.open).toBe(false);
    expect(server.bufferedAmount).toBe(0);
    expect(await new Promise((resolve) => worker.once("exit", resolve))).toBe(1);
  });
});
