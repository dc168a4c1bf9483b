import { readFileSync } from "node:fs";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import WebSocket from "ws";
import { afterEach, describe, expect, it } from "vitest";
import { RUNNER_PROTOCOL_VERSION, type RunnerToServer } from "../../contracts/runner-protocol.ts";
import type { RelayChunk } from "../lifecycle/runner-directory.ts";
import { RUNNER_CONNECT_PATH } from "./runner-hub.ts";
import { SqliteStore } from "../store/sqlite-store.ts";
import { FakeRunner } from "../testing/fake-runner.ts";
import {
  ADMIN_TOKEN,
  bareHub,
  RUNNER_TOKEN,
  startTestServer,
  type TestServer,
} from "../testing/test-server.ts";

let t: TestServer | undefined;
const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  await t?.close();
  t = undefined;
});

async function liveSession(server: TestServer, requestId = "req-1") {
  const provisioned = await server.rpc("ProvisionAgentWorkspace", {
    agent_ref: "alice",
    client_request_id: requestId,
  });
  const container = provisioned.body.container_name as string;
  const started = await server.rpc("StartAgentSession", { container_name: container });
  return { container, sessionId: started.body.session_id as string };
}

async function stateOf(server: TestServer, sessionId: string) {
  const reply = await server.rpc("GetAgentStatus", { session_id: sessionId });
  return (reply.body.sessions as { state: string; reason?: string }[])[0];
}

async function runnerInfo(server: TestServer, name: string) {
  const response = await fetch(`${server.server.url}/v1/runners/${name}`, {
    headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
  });
  return (await response.json()) as Record<string, unknown>;
}

/** A raw link that says hello as `name` with `token`; the close code, or "welcome". */
function impostor(url: string, token: string, name: string, extra: Record<string, unknown> = {}) {
  const ws = new WebSocket(url, { headers: { authorization: `Bearer ${token}` } });
  return new Promise<{ status?: number; code?: number; welcome?: boolean }>((resolve) => {
    ws.on("unexpected-response", (_req, res) => {
      resolve({ status: res.statusCode });
      ws.terminate();
    });
    ws.on("error", () => {});
    ws.on("open", () =>
      ws.send(
        JSON.stringify({
          version: RUNNER_PROTOCOL_VERSION,
          type: "hello",
          payload: {
            runner_name: name,
            capacity: 1_000_000,
            labels: { zone: "evil" },
            engine: "docker",
            sessions: [],
            ...extra,
          },
        }),
      ),
    );
    ws.on("message", (data) => {
      if (JSON.parse(String(data)).type === "welcome") {
        resolve({ welcome: true });
        ws.close();
      }
    });
    ws.on("close", (code) => resolve({ code }));
  });
}

describe("PROTOCOL.md §2 runner identity: registration", () => {
  it("issues a runner that registers with the runner token its own credential, kept only as a hash", async () => {
    t = await startTestServer();
    const runner = await t.runner({ name: "r1" });
    const credential = runner.issuedCredential ?? "";
    expect(credential).toMatch(/^asr_[A-Za-z0-9_-]{43}$/);
    const database = readFileSync(join(t.dataDir, "agent-sessions.db")).toString("latin1");
    const wal = readFileSync(join(t.dataDir, "agent-sessions.db-wal")).toString("latin1");
    expect(database + wal).not.toContain(credential);

    // The next link presents the credential, and the welcome carries none.
    runner.kill();
    const back = await FakeRunner.connect(t.server.runnerUrl, credential, { name: "r1" });
    cleanups.push(() => back.kill());
    expect(back.runnerId).toBe(runner.runnerId);
    expect(back.issuedCredential).toBeUndefined();
  });

  it("refuses the runner token for a name that holds a credential (4003): the holder's link, record and sessions are untouched", async () => {
    t = await startTestServer();
    const real = await t.runner({ name: "gpu-1", capacity: 4, labels: { zone: "a" } });
    const { sessionId } = await liveSession(t);

    expect(await impostor(t.server.runnerUrl, RUNNER_TOKEN, "gpu-1")).toEqual({ code: 4003 });

    expect(real.ws.readyState).toBe(WebSocket.OPEN);
    expect(await stateOf(t, sessionId)).toMatchObject({ state: "READY" });
    expect(await runnerInfo(t, "gpu-1")).toMatchObject({
      capacity: 4,
      labels: { zone: "a" },
      connected: true,
    });
    // The real runner still gets the session's traffic.
    const sent = await t.rpc("SendAgentMessage", {
      session_id: sessionId,
      message: { type: "message", text: "still mine" },
    });
    expect(sent).toMatchObject({ status: 200, body: { state: "READY", wake: "none" } });
    expect(real.commandsOf("send")).toHaveLength(1);
    await t.rpc("StopAgentSession", { session_id: sessionId });
    expect(real.commandsOf("stop")).toEqual([{ kind: "stop", session_id: sessionId }]);
  });

  it("gives a new name to one of two links racing to register it", async () => {
    t = await startTestServer();
    const outcomes = await Promise.all([
      impostor(t.server.runnerUrl, RUNNER_TOKEN, "twin"),
      impostor(t.server.runnerUrl, RUNNER_TOKEN, "twin"),
    ]);
    expect(outcomes.filter((o) => o.welcome)).toHaveLength(1);
    expect(outcomes.filter((o) => o.code === 4003)).toHaveLength(1);
  });
});

describe("PROTOCOL.md §2 runner identity: credentials", () => {
  it("refuses another runner's credential used with this runner's name (4003), the holder untouched", async () => {
    t = await startTestServer();
    const a = await t.runner({ name: "a" });
    const b = await t.runner({ name: "b" });
    const { sessionId } = await liveSession(t);
    const placedOn = (await t.rpc("GetAgentStatus", { session_id: sessionId })).body.sessions as {
      runner_id: string;
    }[];
    const holder = placedOn[0]?.runner_id === a.runnerId ? a : b;
    const other = holder === a ? b : a;
    const holderName = holder === a ? "a" : "b";

    expect(await impostor(t.server.runnerUrl, other.issuedCredential ?? "", holderName)).toEqual({
      code: 4003,
    });
    expect(holder.ws.readyState).toBe(WebSocket.OPEN);
    expect(other.ws.readyState).toBe(WebSocket.OPEN);
    expect(await stateOf(t, sessionId)).toMatchObject({ state: "READY" });
  });

  it("refuses an unknown credential at the upgrade (401) and keeps credentials off the client API", async () => {
    t = await startTestServer();
    const runner = await t.runner({ name: "r" });
    expect(await impostor(t.server.runnerUrl, `asr_${"x".repeat(43)}`, "r")).toEqual({ status: 401 });
    const reply = await t.rpc("GetAgentStatus", {}, runner.issuedCredential);
    expect([401, 403]).toContain(reply.status);
  });

  it("lets the runner reconnect with its credential: the newer link supersedes the older (4000), sessions kept", async () => {
    t = await startTestServer();
    const old = await t.runner({ name: "same" });
    const { container, sessionId } = await liveSession(t);
    const closed = old.closed();
    await t.runner({
      name: "same",
      sessions: [{ session_id: sessionId, container_name: container, state: "READY" }],
    });
    expect(await closed).toBe(4000);
    expect(await stateOf(t, sessionId)).toMatchObject({ state: "READY" });
  });

  it("with registration closed, refuses the runner token (403) and takes a credential an admin issued", async () => {
    t = await startTestServer({ runnerRegistration: "closed" });
    expect(await impostor(t.server.runnerUrl, RUNNER_TOKEN, "new-one")).toEqual({ status: 403 });
    const issued = await fetch(`${t.server.url}/v1/runners/new-one/token`, {
      method: "POST",
      headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
    });
    const { token } = (await issued.json()) as { token: string };
    expect(await impostor(t.server.runnerUrl, token, "new-one")).toEqual({ welcome: true });
  });

  it("cuts the capacity a hello claims to the server's maximum", async () => {
    t = await startTestServer({ maxRunnerCapacity: 50 });
    await t.runner({ name: "greedy", capacity: 1_000_000 });
    expect(await runnerInfo(t, "greedy")).toMatchObject({ capacity: 50 });
  });
});

describe("runner credentials by the admin: POST and DELETE /v1/runners/{name}/token", () => {
  const call = (method: string, path: string, token = ADMIN_TOKEN) => t!.call(method, path, undefined, token);

  it("issues a credential for a name before it attached; the runner token cannot then take the name", async () => {
    t = await startTestServer();
    const issued = await call("POST", "/v1/runners/pre-1/token");
    expect(issued).toMatchObject({ status: 201, body: { runner_name: "pre-1" } });
    const token = issued.body.token as string;
    expect(await impostor(t.server.runnerUrl, RUNNER_TOKEN, "pre-1")).toEqual({ code: 4003 });
    const runner = await FakeRunner.connect(t.server.runnerUrl, token, { name: "pre-1" });
    cleanups.push(() => runner.kill());
    expect(runner.issuedCredential).toBeUndefined();
    // Only the admin token issues credentials.
    expect((await call("POST", "/v1/runners/pre-2/token", RUNNER_TOKEN)).status).toBe(403);
    expect((await call("POST", "/v1/runners/bad%20name/token")).status).toBe(400);
  });

  it("rotating closes the live link (4003) and refuses the old credential (401); revoking frees the name", async () => {
    t = await startTestServer();
    const runner = await t.runner({ name: "rot" });
    const old = runner.issuedCredential ?? "";
    const closed = runner.closed();
    const rotated = await call("POST", "/v1/runners/rot/token");
    expect(await closed).toBe(4003);
    expect(await impostor(t.server.runnerUrl, old, "rot")).toEqual({ status: 401 });
    expect(await impostor(t.server.runnerUrl, rotated.body.token as string, "rot")).toEqual({
      welcome: true,
    });

    expect(await call("DELETE", "/v1/runners/rot/token")).toMatchObject({
      status: 200,
      body: { revoked: true },
    });
    expect(await impostor(t.server.runnerUrl, rotated.body.token as string, "rot")).toEqual({ status: 401 });
    const again = await FakeRunner.connect(t.server.runnerUrl, RUNNER_TOKEN, { name: "rot" });
    cleanups.push(() => again.kill());
    expect(again.issuedCredential).toMatch(/^asr_/);
  });
});

describe("PROTOCOL.md §8 only the runner that owns a session or a relayed request speaks for it", () => {
  it("drops a session_state for a session placed on another runner", async () => {
    t = await startTestServer();
    await t.runner({ name: "owner" });
    const { sessionId } = await liveSession(t);
    const intruder = await t.runner({ name: "intruder" });
    intruder.state(sessionId, "ERRORED", "Forged");
    intruder.frame(sessionId, { type: "message", payload: { text: "forged" } });
    await new Promise((r) => setTimeout(r, 150));
    expect(await stateOf(t, sessionId)).toMatchObject({ state: "READY" });
  });

  it("takes a relay_chunk only from the runner the relayed request went to", async () => {
    const store = new SqliteStore(":memory:");
    const hub = bareHub(store, { heartbeatMs: 1_000 });
    const server: Server = createServer();
    server.on("upgrade", (request, socket, head) => hub.handleUpgrade(request, socket, head));
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    cleanups.push(async () => {
      await hub.close();
      await new Promise((resolve) => server.close(resolve));
      await store.close();
    });
    const url = `ws://127.0.0.1:${(server.address() as AddressInfo).port}${RUNNER_CONNECT_PATH}`;
    const owner = await FakeRunner.connect(url, RUNNER_TOKEN, { name: "owner", handler: () => "no-reply" });
    const intruder = await FakeRunner.connect(url, RUNNER_TOKEN, { name: "intruder" });
    cleanups.push(
      () => owner.kill(),
      () => intruder.kill(),
    );

    const got: RelayChunk[] = [];
    hub.onRelayChunk("relay-1", (chunk) => got.push(chunk));
    void hub.command(owner.runnerId, {
      kind: "relay",
      container_name: "as-default-alice",
      relay_id: "relay-1",
      request: { id: "q1", input: "hi", stream: false },
      timeout_ms: 5_000,
    });
    await owner.until(() => owner.commandsOf("relay").length === 1);
    const chunk = (data: string): RunnerToServer => ({
      version: RUNNER_PROTOCOL_VERSION,
      type: "relay_chunk",
      payload: { relay_id: "relay-1", data, done: true, status: 200 },
    });
    intruder.send(chunk("forged"));
    owner.send(chunk("genuine"));
    await owner.until(() => got.length >= 1);
    await new Promise((r) => setTimeout(r, 50));
    expect(got.map((c) => c.data)).toEqual(["genuine"]);
  });
});
