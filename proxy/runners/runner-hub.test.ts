import WebSocket from "ws";
import { RUNNER_PROTOCOL_VERSION } from "../../contracts/runner-protocol.ts";
import { afterEach, describe, expect, it } from "vitest";
import { ADMIN_TOKEN, RUNNER_TOKEN, startTestServer, type TestServer } from "../testing/test-server.ts";
import type { FakeRunner } from "../testing/fake-runner.ts";

let t: TestServer | undefined;
afterEach(async () => {
  await t?.close();
  t = undefined;
});

/** Provision and start one session through the API; its ids. */
async function liveSession(server: TestServer, requestId = "req-1", workstream?: string) {
  const provisioned = await server.rpc("ProvisionAgentWorkspace", {
    agent_ref: "alice",
    client_request_id: requestId,
    ...(workstream ? { workstream } : {}),
  });
  const container = provisioned.body.container_name as string;
  const started = await server.rpc("StartAgentSession", { container_name: container });
  return { container, sessionId: started.body.session_id as string };
}

async function stateOf(server: TestServer, sessionId: string) {
  const reply = await server.rpc("GetAgentStatus", { session_id: sessionId });
  return (reply.body.sessions as { state: string; reason?: string }[])[0];
}

async function eventually(check: () => Promise<void>, timeoutMs = 5_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      return await check();
    } catch (error) {
      if (Date.now() > deadline) throw error;
      await new Promise((r) => setTimeout(r, 25));
    }
  }
}

function dial(url: string, token?: string): Promise<number> {
  const ws = new WebSocket(url, token ? { headers: { authorization: `Bearer ${token}` } } : {});
  return new Promise((resolve) => {
    ws.on("unexpected-response", (_req, res) => resolve(res.statusCode ?? 0));
    ws.on("open", () => {
      ws.close();
      resolve(101);
    });
    ws.on("error", () => {});
  });
}

describe("§1 transport and authentication", () => {
  it("accepts the runner token and refuses the admin token (403) and no token (401)", async () => {
    t = await startTestServer();
    expect(await dial(t.server.runnerUrl, RUNNER_TOKEN)).toBe(101);
    expect(await dial(t.server.runnerUrl, ADMIN_TOKEN)).toBe(403);
    expect(await dial(t.server.runnerUrl)).toBe(401);
    expect(await dial(t.server.runnerUrl, "not-a-token-at-all-000000")).toBe(401);
  });

  it("keeps the runner token off the client API", async () => {
    t = await startTestServer();
    const reply = await t.rpc("GetAgentStatus", {}, RUNNER_TOKEN);
    expect(reply.status).toBe(403);
    expect(reply.body).toMatchObject({ code: "PERMISSION_DENIED" });
  });
});

describe("§2 handshake", () => {
  it("welcomes with a runner_id that survives reconnects and server restarts", async () => {
    t = await startTestServer();
    const first = await t.runner({ name: "r1" });
    expect(first.runnerId).toMatch(/^runner-/);
    expect(first.received[0]).toMatchObject({
      type: "welcome",
      payload: { runner_id: first.runnerId, heartbeat_ms: 1000 },
    });
    first.kill();
    const second = await t.runner({ name: "r1" });
    expect(second.runnerId).toBe(first.runnerId);
    await t.stop();
    const restarted = await startTestServer({ dataDir: t.dataDir }, { agent: false });
    t = restarted;
    expect((await restarted.runner({ name: "r1" })).runnerId).toBe(first.runnerId);
  });

  it("closes a link whose first message is not hello (4002)", async () => {
    t = await startTestServer();
    const ws = new WebSocket(t.server.runnerUrl, { headers: { authorization: `Bearer ${RUNNER_TOKEN}` } });
    await new Promise((r) => ws.on("open", r));
    const closed = new Promise<number>((r) => ws.on("close", (code) => r(code)));
    ws.send(JSON.stringify({ version: 1, type: "pong", payload: { at: 1 } }));
    expect(await closed).toBe(4002);
  });

  it("lets a newer connection of the same runner supersede the old one (4000)", async () => {
    t = await startTestServer();
    const old = await t.runner({ name: "same" });
    const closed = old.closed();
    await t.runner({ name: "same" });
    expect(await closed).toBe(4000);
  });
});

describe("§3 reconcile", () => {
  it("follows the runner's set on re-hello: reported sessions keep their state, missing ones become ERRORED LostByRunner", async () => {
    t = await startTestServer();
    const runner = await t.runner({ name: "r" });
    const kept = await liveSession(t, "req-1");
    const lost = await t.rpc("ProvisionAgentWorkspace", {
      agent_ref: "alice",
      workstream: "two",
      client_request_id: "req-2",
    });
    const lostSession = (await t.rpc("StartAgentSession", { container_name: lost.body.container_name })).body
      .session_id as string;
    runner.kill();
    await eventually(async () => expect((await stateOf(t!, kept.sessionId))?.state).toBe("DISCONNECTED"));

    await t.runner({
      name: "r",
      sessions: [{ session_id: kept.sessionId, container_name: kept.container, state: "READY" }],
    });
    expect(await stateOf(t, kept.sessionId)).toMatchObject({ state: "READY" });
    expect(await stateOf(t, lostSession)).toMatchObject({ state: "ERRORED", reason: "LostByRunner" });
  });

  it("tells the runner to stop a session the server settled (never revives it)", async () => {
    t = await startTestServer();
    const runner = await t.runner({ name: "r" });
    const { container, sessionId } = await liveSession(t);
    runner.kill();
    await t.rpc("StopAgentSession", { session_id: sessionId }); // deliberate stop while the link is down
    const back = await t.runner({
      name: "r",
      sessions: [{ session_id: sessionId, container_name: container, state: "READY" }],
    });
    await back.until(() => back.commandsOf("stop").length === 1);
    expect(back.commandsOf("stop")).toEqual([{ kind: "stop", session_id: sessionId }]);
    expect(await stateOf(t, sessionId)).toMatchObject({ state: "STOPPED" });
  });
  it("has one stop at a time on the runner for a settled session: the STOPPING it reports while stopping sends no more", async () => {
    t = await startTestServer();
    const runner = await t.runner({ name: "r" });
    const { container, sessionId } = await liveSession(t);
    runner.kill();
    await t.rpc("StopAgentSession", { session_id: sessionId });
    let release!: () => void;
    const released = new Promise<void>((r) => {
      release = r;
    });
    // The stop may arrive before t.runner() resolves: the handler waits for the runner object.
    let attached!: (runner: FakeRunner) => void;
    const self = new Promise<FakeRunner>((r) => {
      attached = r;
    });
    // What a runner does: STOPPING at once, the agent's end later, then STOPPED.
    const back = await t.runner({
      name: "r",
      sessions: [{ session_id: sessionId, container_name: container, state: "READY" }],
      handler: async (c) => {
        if (c.kind !== "stop") return { ok: true, result: {} };
        const back = await self;
        back.state(sessionId, "STOPPING");
        back.state(sessionId, "STOPPING");
        await released;
        back.state(sessionId, "STOPPED");
        return { ok: true, result: { state: "STOPPED" } };
      },
    });
    attached(back);
    await back.until(() => back.commandsOf("stop").length === 1);
    await new Promise((r) => setTimeout(r, 200)); // the STOPPING reports reach the server
    release();
    await new Promise((r) => setTimeout(r, 200));
    expect(back.commandsOf("stop")).toEqual([{ kind: "stop", session_id: sessionId }]);
    expect(await stateOf(t, sessionId)).toMatchObject({ state: "STOPPED" });
  });
});

describe("§4 heartbeats", () => {
  it("treats a runner that misses 2 heartbeats as disconnected", async () => {
    t = await startTestServer({ heartbeatMs: 100, reattachWindowMs: 60_000 });
    const runner = await t.runner({ name: "quiet" });
    const { sessionId } = await liveSession(t);
    runner.answerPings = false;
    const code = await runner.closed();
    expect(code).toBe(1006); // terminated, no close frame
    await eventually(async () =>
      expect(await stateOf(t!, sessionId)).toMatchObject({
        state: "DISCONNECTED",
        reason: "RunnerDisconnected",
      }),
    );
  });

  it("keeps its runners when the server itself was stopped: a pause of the whole process is not their silence", async () => {
    t = await startTestServer({ heartbeatMs: 50, reattachWindowMs: 60_000 });
    const runner = await t.runner({ name: "paused" });
    const { sessionId } = await liveSession(t);
    await new Promise((r) => setTimeout(r, 120));
    // Block this process (server and runner alike) for 10 heartbeats, as a paused machine does.
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 500);
    await new Promise((r) => setTimeout(r, 300));
    expect(runner.ws.readyState).toBe(WebSocket.OPEN);
    expect((await stateOf(t, sessionId))?.state).toBe("READY");
    // Silence afterwards still ends the link.
    runner.answerPings = false;
    expect(await runner.closed()).toBe(1006);
  });

  it("keeps a runner that answers pings attached", async () => {
    t = await startTestServer({ heartbeatMs: 50 });
    const runner = await t.runner();
    await new Promise((r) => setTimeout(r, 400));
    expect(runner.ws.readyState).toBe(WebSocket.OPEN);
    expect(runner.received.filter((m) => m.type === "ping").length).toBeGreaterThanOrEqual(4);
  });
});

describe("§5 disconnect and the reattach window", () => {
  it("moves sessions to DISCONNECTED, then ERRORED ReattachExpired exactly once when the window closes", async () => {
    t = await startTestServer({ reattachWindowMs: 200 });
    const runner = await t.runner({ name: "r" });
    const { sessionId } = await liveSession(t);
    const events = await t.events(`?session_id=${sessionId}`, "2");
    runner.kill();
    await events.until((e) => e.length >= 2);
    await new Promise((r) => setTimeout(r, 300));
    expect(events.frames().map((f) => f.payload)).toEqual([
      { state: "DISCONNECTED", reason: "RunnerDisconnected" },
      { state: "ERRORED", reason: "ReattachExpired" },
    ]);
  });

  it("resumes sessions when the runner reattaches within the window", async () => {
    t = await startTestServer({ reattachWindowMs: 300 });
    const runner = await t.runner({ name: "r" });
    const { container, sessionId } = await liveSession(t);
    runner.kill();
    await eventually(async () => expect((await stateOf(t!, sessionId))?.state).toBe("DISCONNECTED"));
    await t.runner({
      name: "r",
      sessions: [{ session_id: sessionId, container_name: container, state: "READY" }],
    });
    await new Promise((r) => setTimeout(r, 450)); // past the window: nothing expires
    expect(await stateOf(t, sessionId)).toMatchObject({ state: "READY" });
  });

  it("fails in-flight commands when the link is lost, and leaves the session to the window", async () => {
    t = await startTestServer({ reattachWindowMs: 60_000 });
    const runner = await t.runner({ name: "r" });
    const provisioned = await t.rpc("ProvisionAgentWorkspace", {
      agent_ref: "alice",
      client_request_id: "req",
    });
    runner.handler = (c) => (c.kind === "start" ? "no-reply" : { ok: true, result: {} });
    const starting = t.rpc("StartAgentSession", { container_name: provisioned.body.container_name });
    await runner.until(() => runner.commandsOf("start").length === 1);
    runner.kill();
    const reply = await starting;
    expect(reply.status).toBe(503);
    expect(reply.body).toMatchObject({ code: "UNAVAILABLE" });
    const status = await t.rpc("GetAgentStatus", {});
    expect(status.body.sessions).toMatchObject([{ state: "DISCONNECTED" }]);
  });

  it("after a server restart, sessions wait DISCONNECTED for their runner to reattach", async () => {
    t = await startTestServer();
    await t.runner({ name: "r" });
    const { container, sessionId } = await liveSession(t);
    await t.stop();
    t = await startTestServer({ dataDir: t.dataDir }, { agent: false });
    expect(await stateOf(t, sessionId)).toMatchObject({ state: "DISCONNECTED" });
    await t.runner({
      name: "r",
      sessions: [{ session_id: sessionId, container_name: container, state: "READY" }],
    });
    expect(await stateOf(t, sessionId)).toMatchObject({ state: "READY" });
  });
});

describe("§7 commands", () => {
  it("returns a runner's error as a value with its gRPC code", async () => {
    t = await startTestServer();
    const runner = await t.runner();
    runner.handler = () => ({ ok: false, error: { code: "RESOURCE_EXHAUSTED", message: "disk full" } });
    const reply = await t.rpc("ProvisionAgentWorkspace", { agent_ref: "alice", client_request_id: "req" });
    expect(reply.status).toBe(429);
    expect(reply.body.message).toContain("disk full");
  });

  it("fails a command the runner does not answer in time with DEADLINE_EXCEEDED", async () => {
    t = await startTestServer({ commandTimeoutMs: 150 });
    const runner = await t.runner();
    runner.handler = () => "no-reply";
    const reply = await t.rpc("ProvisionAgentWorkspace", { agent_ref: "alice", client_request_id: "req" });
    expect(reply.status).toBe(504);
  });
});

describe("§8 frames and states", () => {
  it("stores runner frames under the next per-session seq and publishes them", async () => {
    t = await startTestServer();
    const runner = await t.runner();
    const { sessionId } = await liveSession(t);
    const events = await t.events(`?session_id=${sessionId}`);
    runner.frame(sessionId, { type: "message", payload: { text: "hello" } });
    runner.frame(sessionId, { type: "delta", payload: { text: "!" } });
    await events.until((e) => e.length >= 2);
    expect(events.events.map((e) => e.id)).toEqual(["3", "4"]);
    expect(events.frames()).toMatchObject([
      { seq: 3, session_id: sessionId, type: "message", payload: { text: "hello" } },
      { seq: 4, type: "delta" },
    ]);
  });

  it("publishes a session_state as a status frame, and never turns a deliberate stop into ERRORED", async () => {
    t = await startTestServer();
    const runner = await t.runner();
    const { sessionId } = await liveSession(t);
    runner.handler = async (c) => {
      if (c.kind === "stop") runner.state(sessionId, "ERRORED", "AgentExited(143)");
      return { ok: true, result: { state: "STOPPED" } };
    };
    await t.rpc("StopAgentSession", { session_id: sessionId });
    expect(await stateOf(t, sessionId)).toMatchObject({ state: "STOPPED", reason: "Stopped" });
  });

  it("drops frames for a session not placed on the sending runner", async () => {
    t = await startTestServer();
    await t.runner({ name: "owner" });
    const { sessionId } = await liveSession(t);
    const other = await t.runner({ name: "intruder" });
    const events = await t.events(`?session_id=${sessionId}`, "0");
    other.frame(sessionId, { type: "message", payload: { text: "forged" } });
    await events.until((e) => e.length >= 2);
    await new Promise((r) => setTimeout(r, 100));
    expect(events.frames().map((f) => f.type)).toEqual(["status", "status"]);
  });

  it("refuses a status frame relayed for an agent: not stored, not fanned out, the state unchanged", async () => {
    t = await startTestServer();
    const runner = await t.runner();
    const { sessionId } = await liveSession(t);
    const events = await t.events(`?session_id=${sessionId}`, "0");
    // Sent raw: the fake runner's own validation would refuse it before it left.
    runner.ws.send(
      JSON.stringify({
        version: RUNNER_PROTOCOL_VERSION,
        type: "frame",
        payload: {
          session_id: sessionId,
          frame: { protocol: "compass.v1", type: "status", payload: { state: "STOPPED" } },
        },
      }),
    );
    runner.frame(sessionId, { type: "message", payload: { text: "after" } });
    await events.until((e) => e.length >= 3);
    expect(events.frames().map((f) => [f.type, f.payload])).toEqual([
      ["status", { state: "STARTING" }],
      ["status", { state: "READY" }],
      ["message", { text: "after" }],
    ]);
    expect(await stateOf(t, sessionId)).toMatchObject({ state: "READY" });
  });

  it("drops a session's frames over the server's budget with one notice in their place; other sessions unaffected", async () => {
    t = await startTestServer({ sessionFramesPerSecond: 1 }); // a burst of 2 s = 2 frames
    const runner = await t.runner();
    const { sessionId } = await liveSession(t);
    const quiet = await liveSession(t, "req-2", "quiet");
    const events = await t.events(`?session_id=${sessionId}`, "0");
    for (let i = 0; i < 20; i++) runner.frame(sessionId, { type: "log", payload: { i } });
    runner.frame(quiet.sessionId, { type: "message", payload: { text: "unaffected" } });
    await events.until((e) => e.length >= 5);
    await new Promise((r) => setTimeout(r, 100));
    expect(events.frames().map((f) => [f.type, f.payload])).toEqual([
      ["status", { state: "STARTING" }],
      ["status", { state: "READY" }],
      ["log", { i: 0 }],
      ["log", { i: 1 }],
      [
        "error",
        {
          message: "frames dropped: the session's output exceeds the server's budget",
          frames_per_second: 1,
          bytes_per_second: 16 * 1024 * 1024,
        },
      ],
    ]);
    const other = await t.events(`?session_id=${quiet.sessionId}`, "0");
    await other.until((e) => e.length >= 3);
    expect(other.frames().at(-1)).toMatchObject({ type: "message", payload: { text: "unaffected" } });
  });
});
