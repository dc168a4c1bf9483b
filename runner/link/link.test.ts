import { Socket, type AddressInfo } from "node:net";
import { afterEach, describe, expect, it, vi } from "vitest";
import { WebSocketServer } from "ws";
import {
  RUNNER_PROTOCOL_VERSION,
  type RunnerToServer,
  UPLOAD_WINDOW_CAPABILITY,
} from "../../contracts/runner-protocol.ts";
import { backoffDelay, type LinkOptions, RunnerLink } from "./link.ts";

/** A runner link to `serverUrl` (not started) with no sessions; its log lines go to `log`. */
function testLink(
  serverUrl: string,
  options: Partial<LinkOptions> = {},
  log: (msg: string) => void = () => {},
) {
  return new RunnerLink(
    {
      serverUrl,
      token: "runner-token-0123456789",
      name: "r",
      engine: "docker",
      capacity: 1,
      labels: {},
      ...options,
    },
    { sessions: () => [], command: async () => ({}), log: (_level, msg) => log(msg) },
  );
}

/** A link never started: every send goes to the offline queue. */
function detachedLink(limits: { maxQueue?: number; maxQueueBytes?: number }) {
  return testLink("http://127.0.0.1:1", limits);
}

const frame = (text: string): RunnerToServer & { type: "frame" } => ({
  version: RUNNER_PROTOCOL_VERSION,
  type: "frame" as const,
  payload: {
    session_id: "s1",
    frame: { protocol: "compass.v1" as const, type: "log" as const, payload: { text } },
  },
});

describe("the runner link's offline queue", () => {
  it("is bounded in bytes, not only in messages: big frames push out the oldest", () => {
    const link = detachedLink({ maxQueue: 10_000, maxQueueBytes: 100_000 });
    for (let i = 0; i < 100; i++) link.send(frame("z".repeat(10_000)));
    expect(link.backlog).toBeLessThanOrEqual(100_000);
    expect(link.backlog).toBeGreaterThan(80_000);
  });

  it("is bounded in messages too", () => {
    const link = detachedLink({ maxQueue: 5 });
    for (let i = 0; i < 50; i++) link.send(frame("a"));
    const one = JSON.stringify(frame("a")).length;
    expect(link.backlog).toBe(5 * one);
  });

  it("validates a message before queueing it", () => {
    const link = detachedLink({});
    expect(() => link.send({ ...frame("a"), payload: { session_id: 1 } } as never)).toThrow();
    expect(link.backlog).toBe(0);
  });
});

describe("backoff", () => {
  it("is full jitter below the capped exponential", () => {
    expect(backoffDelay(3, 250, 10_000, () => 0.999)).toBe(1998);
    expect(backoffDelay(30, 250, 10_000, () => 0.5)).toBe(5000);
  });
});

describe("the runner link's writes", () => {
  it("sends the messages of one tick in one write, in order, and holds none back", async () => {
    const server = new WebSocketServer({ host: "127.0.0.1", port: 0 });
    await new Promise<void>((resolve) => server.once("listening", () => resolve()));
    const received: string[] = [];
    const attached = new Promise<void>((resolve) => {
      server.on("connection", (ws) => {
        ws.on("message", (data) => {
          const message = JSON.parse(String(data)) as RunnerToServer;
          if (message.type === "hello") {
            ws.send(
              JSON.stringify({
                version: RUNNER_PROTOCOL_VERSION,
                type: "welcome",
                payload: { runner_id: "r-1", heartbeat_ms: 60_000 },
              }),
            );
            setTimeout(resolve, 50);
          } else if (message.type === "frame" && message.payload.frame.type === "log")
            received.push(String(message.payload.frame.payload.text));
        });
      });
    });
    const { port } = server.address() as AddressInfo;
    const link = testLink(`http://127.0.0.1:${port}`);
    const writes = { one: 0, many: 0 };
    const single = vi.spyOn(Socket.prototype, "_write");
    const vectored = vi.spyOn(Socket.prototype, "_writev");
    try {
      link.start();
      await attached;
      expect(link.attached).toBe(true);
      single.mockClear();
      vectored.mockClear();
      for (const text of ["a", "b", "c"]) link.send(frame(text));
      await expect.poll(() => received).toEqual(["a", "b", "c"]);
      writes.one = single.mock.calls.length;
      writes.many = vectored.mock.calls.length;
      // Sent in a later tick: not held back by the earlier cork.
      await new Promise((r) => setImmediate(r));
      link.send(frame("d"));
      await expect.poll(() => received).toEqual(["a", "b", "c", "d"]);
    } finally {
      single.mockRestore();
      vectored.mockRestore();
      link.close();
      await new Promise((resolve) => server.close(resolve));
    }
    expect(writes).toEqual({ one: 0, many: 1 });
  });
});

/**
 * A server that welcomes the runner with a heartbeat interval, then pings every interval or not
 * at all; it counts the connections it gets (a second one is a redial).
 */
async function heartbeatServer(heartbeatMs: number, pings: boolean) {
  const server = new WebSocketServer({ host: "127.0.0.1", port: 0 });
  await new Promise<void>((resolve) => server.once("listening", () => resolve()));
  let connections = 0;
  const timers: NodeJS.Timeout[] = [];
  server.on("connection", (ws) => {
    connections++;
    ws.on("message", (data) => {
      if ((JSON.parse(String(data)) as RunnerToServer).type !== "hello") return;
      const welcome = { runner_id: "r-1", heartbeat_ms: heartbeatMs };
      ws.send(JSON.stringify({ version: RUNNER_PROTOCOL_VERSION, type: "welcome", payload: welcome }));
      if (pings)
        timers.push(
          setInterval(() => {
            const ping = { version: RUNNER_PROTOCOL_VERSION, type: "ping", payload: { at: Date.now() } };
            ws.send(JSON.stringify(ping));
          }, heartbeatMs),
        );
    });
  });
  const { port } = server.address() as AddressInfo;
  const logs: string[] = [];
  const link = testLink(`http://127.0.0.1:${port}`, { backoffBaseMs: 10 }, (msg) => logs.push(msg));
  link.start();
  await expect.poll(() => link.attached).toBe(true);
  return {
    link,
    logs,
    connections: () => connections,
    close: async () => {
      for (const t of timers) clearInterval(t);
      link.close();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

describe("the runner's side of the heartbeat (PROTOCOL.md §4)", () => {
  it("drops a link whose server went silent and redials", async () => {
    const s = await heartbeatServer(50, false);
    try {
      await expect.poll(() => s.connections(), { timeout: 3_000 }).toBeGreaterThanOrEqual(2);
      expect(s.logs).toContain("the server sent nothing for 3 heartbeats; dropping the link to redial");
    } finally {
      await s.close();
    }
  });

  it("keeps a link whose server pings, also across a stop of this whole process", async () => {
    const s = await heartbeatServer(50, true);
    try {
      await new Promise((r) => setTimeout(r, 300));
      // Block the process (the server in it too) for 10 intervals, as a paused machine does.
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 500);
      await new Promise((r) => setTimeout(r, 300));
      expect(s.connections()).toBe(1);
      expect(s.link.attached).toBe(true);
    } finally {
      await s.close();
    }
  });
});

describe("the runner's command deadlines (PROTOCOL.md §7)", () => {
  /** A link dialled in process to a fake server that welcomes it; `sent` are the runner's messages. */
  async function attached(command: (c: unknown, signal: AbortSignal) => Promise<Record<string, unknown>>) {
    const { inProcessLink } = await import("../../contracts/runner-channel.ts");
    const sent: RunnerToServer[] = [];
    let server: import("../../contracts/runner-channel.ts").LinkChannel | undefined;
    const welcomed = new Promise<void>((resolve) => {
      const link = new RunnerLink(
        {
          serverUrl: "http://127.0.0.1:1",
          token: "runner-token-0123456789",
          name: "r",
          engine: "docker",
          capacity: 1,
          labels: {},
          dial: async () => {
            const pair = inProcessLink();
            server = pair.server;
            pair.server.onMessage((text) => {
              const message = JSON.parse(text as string) as RunnerToServer;
              sent.push(message);
              if (message.type === "hello") {
                pair.server.send(
                  JSON.stringify({
                    version: RUNNER_PROTOCOL_VERSION,
                    type: "welcome",
                    payload: { runner_id: "id-r", heartbeat_ms: 60_000 },
                  }),
                );
                setTimeout(resolve, 10);
              }
            });
            return { ok: true, channel: pair.runner };
          },
        },
        { sessions: () => [], command: command as never, log: () => {} },
      );
      link.start();
      cleanups.push(() => link.close());
    });
    await welcomed;
    const send = (message: object) =>
      server?.send(JSON.stringify({ version: RUNNER_PROTOCOL_VERSION, ...message }));
    return { sent, send };
  }
  const cleanups: (() => void)[] = [];
  afterEach(() => {
    for (const c of cleanups.splice(0)) c();
  });
  const list = { kind: "workspace_list", container_name: "c", path: "" };
  const hanging = (seen: AbortSignal[]) => (_c: unknown, signal: AbortSignal) => {
    seen.push(signal);
    return new Promise<Record<string, unknown>>(() => {});
  };
  const resultOf = (sent: RunnerToServer[], id: string) =>
    sent.find((m) => m.type === "result" && m.payload.command_id === id)?.payload;

  it("aborts a command past the deadline the server gave it and answers DEADLINE_EXCEEDED", async () => {
    const seen: AbortSignal[] = [];
    const { sent, send } = await attached(hanging(seen));
    send({ type: "command", payload: { command_id: "c1", command: list, deadline_ms: 50 } });
    await vi.waitFor(() => expect(resultOf(sent, "c1")).toBeDefined(), { timeout: 2000 });
    expect(seen[0]?.aborted).toBe(true);
    expect(resultOf(sent, "c1")).toMatchObject({ ok: false, error: { code: "DEADLINE_EXCEEDED" } });
  });

  it("aborts a command the server cancels and answers CANCELLED", async () => {
    const seen: AbortSignal[] = [];
    const { sent, send } = await attached(hanging(seen));
    send({ type: "command", payload: { command_id: "c2", command: list, deadline_ms: 60_000 } });
    await vi.waitFor(() => expect(seen).toHaveLength(1));
    send({ type: "cancel", payload: { command_id: "c2" } });
    await vi.waitFor(() => expect(resultOf(sent, "c2")).toBeDefined(), { timeout: 2000 });
    expect(seen[0]?.aborted).toBe(true);
    expect(resultOf(sent, "c2")).toMatchObject({ ok: false, error: { code: "CANCELLED" } });
  });
});

describe("binary frames on the runner's side (PROTOCOL.md §9)", () => {
  const cleanups: (() => void)[] = [];
  afterEach(() => {
    for (const c of cleanups.splice(0)) c();
  });

  /** A runner link welcomed in process by a fake server announcing `capabilities`; what each end got. */
  async function welcomedBy(capabilities: string[] | undefined) {
    const { inProcessLink } = await import("../../contracts/runner-channel.ts");
    const sent: RunnerToServer[] = [];
    const binary: Uint8Array[] = [];
    const bulks: (Buffer | undefined)[] = [];
    let server: import("../../contracts/runner-channel.ts").LinkChannel | undefined;
    let link!: RunnerLink;
    await new Promise<void>((resolve) => {
      link = new RunnerLink(
        {
          serverUrl: "http://127.0.0.1:1",
          token: "runner-token-0123456789",
          name: "r",
          engine: "docker",
          capacity: 1,
          labels: {},
          dial: async () => {
            const pair = inProcessLink();
            server = pair.server;
            pair.server.onMessage((message) => {
              if (typeof message !== "string") return void binary.push(message);
              const parsed = JSON.parse(message) as RunnerToServer;
              sent.push(parsed);
              if (parsed.type === "hello")
                pair.server.send(
                  JSON.stringify({
                    version: RUNNER_PROTOCOL_VERSION,
                    type: "welcome",
                    payload: {
                      runner_id: "id-r",
                      heartbeat_ms: 60_000,
                      ...(capabilities ? { capabilities } : {}),
                    },
                  }),
                );
            });
            return { ok: true, channel: pair.runner };
          },
        },
        {
          sessions: () => [],
          command: async (_c, _signal, bulk) => {
            bulks.push(bulk);
            return { size: bulk?.length ?? 0 };
          },
          log: () => {},
        },
      );
      link.start();
      cleanups.push(() => link.close());
      const wait = setInterval(() => {
        if (link.attached) {
          clearInterval(wait);
          resolve();
        }
      }, 2);
    });
    const send = (message: string | Uint8Array) => server?.send(message);
    return { link, sent, binary, bulks, send };
  }
  const write = (commandId: string, dataFrame: boolean) =>
    JSON.stringify({
      version: RUNNER_PROTOCOL_VERSION,
      type: "command",
      payload: {
        command_id: commandId,
        command: {
          kind: "workspace_write",
          container_name: "c",
          path: "f",
          upload_id: "upload-0001",
          seq: 0,
          data: dataFrame ? "" : Buffer.from("b64").toString("base64"),
          ...(dataFrame ? { data_frame: true } : {}),
          done: true,
        },
      },
    });
  const resultOf = (sent: RunnerToServer[], id: string) =>
    sent.find((m) => m.type === "result" && m.payload.command_id === id)?.payload;

  it("announces them in its hello, and sends raw only after a welcome that announced them too", async () => {
    const { BINARY_FRAMES_CAPABILITY, BinaryKind, encodeBinaryFrame } = await import(
      "../../contracts/runner-binary.ts"
    );
    const old = await welcomedBy(undefined);
    expect(old.sent[0]).toMatchObject({
      type: "hello",
      payload: { capabilities: [BINARY_FRAMES_CAPABILITY, UPLOAD_WINDOW_CAPABILITY] },
    });
    expect(old.link.binary).toBe(false);
    expect(old.link.sendBinary(encodeBinaryFrame(BinaryKind.relayChunk, "r1", Buffer.from("x")))).toBe(false);
    const current = await welcomedBy([BINARY_FRAMES_CAPABILITY]);
    expect(current.link.binary).toBe(true);
    expect(current.link.sendBinary(encodeBinaryFrame(BinaryKind.relayChunk, "r1", Buffer.from("x")))).toBe(
      true,
    );
    await vi.waitFor(() => expect(current.binary).toHaveLength(1));
    await new Promise((r) => setTimeout(r, 20));
    expect(old.binary).toHaveLength(0);
  });

  it("hands a piece's raw bytes to the command that follows its frame; without the frame INVALID_ARGUMENT", async () => {
    const { BINARY_FRAMES_CAPABILITY, BinaryKind, encodeBinaryFrame } = await import(
      "../../contracts/runner-binary.ts"
    );
    const s = await welcomedBy([BINARY_FRAMES_CAPABILITY]);
    s.send(encodeBinaryFrame(BinaryKind.commandData, "c1", Buffer.from("raw bytes")));
    s.send(write("c1", true));
    await vi.waitFor(() => expect(resultOf(s.sent, "c1")).toBeDefined());
    expect(resultOf(s.sent, "c1")).toMatchObject({ ok: true, result: { size: 9 } });
    expect(s.bulks[0]?.toString()).toBe("raw bytes");
    s.send(write("c2", true));
    await vi.waitFor(() => expect(resultOf(s.sent, "c2")).toBeDefined());
    expect(resultOf(s.sent, "c2")).toMatchObject({ ok: false, error: { code: "INVALID_ARGUMENT" } });
    // A malformed frame is dropped; the link goes on, and base64 pieces still work.
    s.send(Buffer.from([1, 2, 0]));
    s.send(write("c3", false));
    await vi.waitFor(() => expect(resultOf(s.sent, "c3")).toBeDefined());
    expect(resultOf(s.sent, "c3")).toMatchObject({ ok: true });
    expect(s.bulks).toHaveLength(2);
    expect(s.bulks[1]).toBeUndefined();
  });

  it("drops binary frames from a server that did not announce them", async () => {
    const { BinaryKind, encodeBinaryFrame } = await import("../../contracts/runner-binary.ts");
    const s = await welcomedBy(undefined);
    s.send(encodeBinaryFrame(BinaryKind.commandData, "c1", Buffer.from("raw bytes")));
    s.send(write("c1", true));
    await vi.waitFor(() => expect(resultOf(s.sent, "c1")).toBeDefined());
    expect(resultOf(s.sent, "c1")).toMatchObject({ ok: false, error: { code: "INVALID_ARGUMENT" } });
  });
});
