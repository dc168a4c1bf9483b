import { once } from "node:events";
import { mkdtempSync, rmSync } from "node:fs";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it, vi } from "vitest";
import { startTurnAdapter, turnHandler } from "./adapter-entry.ts";
import type { AgentProcess } from "./json-lines-child.ts";
import { redactor } from "./redact.ts";
import type { RunTurn, TurnOutcome } from "./turn.ts";

const KEY = "sk-provider-0123456789";
const redact = redactor([KEY]);

describe("a runtime's adapter answering requests one turn each", () => {
  it("streams redacted deltas and tool events as the contract names them, then the redacted answer", async () => {
    const handle = turnHandler(async (input, { onDelta, onTool }) => {
      onDelta?.(KEY);
      onTool?.({ phase: "end", callId: "c1", name: "bash", isError: true });
      return { outcome: "succeeded", text: `${input} ${KEY}`, usage: "unavailable" };
    }, redact);
    const events: unknown[] = [];
    const reply = await handle("hi", {
      requestId: "r1",
      signal: new AbortController().signal,
      onDelta: (text) => events.push({ delta: text }),
      onTool: (event) => events.push(event),
    });
    expect(reply).toEqual({ text: "hi [redacted]", usage: "unavailable" });
    expect(events).toEqual([
      { delta: "[redacted]" },
      { phase: "end", call_id: "c1", name: "bash", is_error: true },
    ]);
  });

  it("runs a request only after the one before it ended, and fails with the turn's redacted error", async () => {
    let release!: (outcome: TurnOutcome) => void;
    const started: string[] = [];
    const handle = turnHandler((input) => {
      started.push(input);
      if (input === "first") return new Promise((resolve) => (release = resolve));
      return Promise.resolve({ outcome: "failed", error: `bad key ${KEY}`, text: "" });
    }, redact);
    const context = { requestId: "r", signal: new AbortController().signal };
    const first = handle("first", context);
    const second = handle("second", context);
    await new Promise((r) => setTimeout(r, 10));
    expect(started).toEqual(["first"]);
    release({ outcome: "succeeded", text: "one", usage: "unavailable" });
    expect(await first).toEqual({ text: "one", usage: "unavailable" });
    await expect(second).rejects.toThrow("bad key [redacted]");
  });

  it("never starts a request cancelled while it waited", async () => {
    const controller = new AbortController();
    controller.abort(new Error("cancelled by request"));
    let ran = false;
    const handle = turnHandler(async () => {
      ran = true;
      return { outcome: "succeeded", text: "", usage: "unavailable" };
    }, redact);
    await expect(handle("x", { requestId: "r", signal: controller.signal })).rejects.toThrow(
      "cancelled by request",
    );
    expect(ran).toBe(false);
  });
});

/** An adapter on a loopback port whose agent starts when the test says (`start` / `fail`). */
async function adapterStarting(run: RunTurn) {
  let start!: (agent: AgentProcess) => void;
  let fail!: (error: Error) => void;
  const agent = new Promise<AgentProcess>((resolve, reject) => {
    start = resolve;
    fail = reject;
  });
  let exited!: (code: number) => void;
  const exit = new Promise<number>((resolve) => {
    exited = resolve;
  });
  const workspace = mkdtempSync(join(tmpdir(), "adapter-entry-"));
  const server = startTurnAdapter({
    runtime: "test",
    run,
    providerKey: KEY,
    agent,
    env: {
      port: 0,
      token: TOKEN,
      streaming: false,
      maxBodyBytes: 64 * 1024,
      requestTimeoutMs: 30_000,
      workspace,
    },
    exit: (code) => exited(code),
  });
  await once(server, "listening");
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const auth = { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" };
  return {
    start,
    fail,
    exit,
    readyz: async () => {
      const res = await fetch(`${base}/readyz`);
      return { status: res.status, body: (await res.json()) as Record<string, unknown> };
    },
    request: async (id: string, input: string) => {
      const res = await fetch(`${base}/v1/requests`, {
        method: "POST",
        headers: auth,
        body: JSON.stringify({ id, input }),
      });
      return { status: res.status, body: (await res.json()) as Record<string, unknown> };
    },
    cancel: (id: string) => fetch(`${base}/v1/requests/${id}/cancel`, { method: "POST", headers: auth }),
    close: () => {
      server.closeAllConnections();
      server.close();
      rmSync(workspace, { recursive: true, force: true });
    },
  };
}

const TOKEN = "adapter-token-0123456789";
const running: AgentProcess = {
  running: true,
  exited: new Promise(() => undefined),
  stop: async () => undefined,
};
const echo: RunTurn = async (input) => ({
  outcome: "succeeded",
  text: `echo ${input}`,
  usage: "unavailable",
});

describe("a runtime's adapter while its agent starts", () => {
  it("answers /readyz at once; a request sent meanwhile waits for the start and is then answered", async () => {
    const ran: string[] = [];
    const adapter = await adapterStarting(async (input, options) => {
      ran.push(input);
      return echo(input, options);
    });
    try {
      expect(await adapter.readyz()).toEqual({
        status: 200,
        body: { ready: true, inflight: 0, agent: "starting" },
      });
      const answer = adapter.request("r1", "hi");
      await vi.waitFor(async () => expect((await adapter.readyz()).body.inflight).toBe(1));
      expect(ran).toEqual([]); // not before the agent is up
      adapter.start(running);
      expect(await answer).toMatchObject({
        status: 200,
        body: { id: "r1", outcome: "succeeded", output: "echo hi" },
      });
      expect(ran).toEqual(["hi"]);
      expect(await adapter.readyz()).toEqual({ status: 200, body: { ready: true, inflight: 0 } });
    } finally {
      adapter.close();
    }
  });

  it("cancels a request that waits for the start at once, without running it", async () => {
    let ran = false;
    const adapter = await adapterStarting(async (input, options) => {
      ran = true;
      return echo(input, options);
    });
    try {
      const answer = adapter.request("r1", "hi");
      await vi.waitFor(async () => expect((await adapter.readyz()).body.inflight).toBe(1));
      expect((await adapter.cancel("r1")).status).toBe(202);
      expect(await answer).toMatchObject({ status: 499, body: { outcome: "cancelled" } });
      expect(ran).toBe(false);
    } finally {
      adapter.start(running);
      adapter.close();
    }
  });

  it("fails the requests waiting with the start's redacted error when the agent does not start, says not ready, and exits 1 after answering them", async () => {
    const adapter = await adapterStarting(echo);
    try {
      const answer = adapter.request("r1", "hi");
      await vi.waitFor(async () => expect((await adapter.readyz()).body.inflight).toBe(1));
      let exitCode: number | undefined;
      void adapter.exit.then((code) => {
        exitCode = code;
      });
      adapter.fail(new Error(`pi did not start: it exited (key ${KEY})`));
      const failed = await answer;
      expect(failed).toMatchObject({
        status: 502,
        body: { id: "r1", outcome: "failed", error: "pi did not start: it exited (key [redacted])" },
      });
      expect(exitCode).toBeUndefined(); // the answer went out first
      expect(await adapter.exit).toBe(1);
    } finally {
      adapter.close();
    }
  });
});
