/**
 * A restarted runner serves the workspaces it provisioned before (issue 21), without engines: a
 * real server, the real Runner over the real WebSocket, an in-memory engine driver whose
 * "engine" (running workloads) and "stacks" (adapter tokens) outlive the runner process, and a
 * loopback adapter that checks the token on every request.
 */
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import {
  ADMIN_TOKEN,
  RUNNER_TOKEN,
  startTestServer,
  type TestServer,
} from "../../proxy/testing/test-server.ts";
import { parseRunnerConfig } from "../../runner/config.ts";
import { FakeDriver, type FakeMachine, fakeMachine } from "../../runner/engine/fake-driver.ts";
import { Runner } from "../../runner/runner.ts";

// biome-ignore lint/suspicious/noExplicitAny: JSON bodies of many shapes, read by assertions
type Json = any;

const BASE = "/v1/namespaces/default/harnesssessions";

/** What survives a runner process (runner/engine/fake-driver.ts), and where its adapter listens. */
type Machine = FakeMachine & { endpoint: string };

/** One runner process's driver over the machine; counts its provisions and agent starts. */
function driverOf(machine: Machine) {
  const driver = new FakeDriver({ machine, endpoint: () => machine.endpoint });
  const counts = {
    get provisions() {
      return driver.provisions.length;
    },
    get agentStarts() {
      return driver.starts.length;
    },
  };
  return { driver, counts };
}

let t: TestServer;
let adapter: Server;
let machine: Machine;
let dataDir: string;
const runners: Runner[] = [];
/** Tokens the adapter saw on requests. */
const seenTokens: string[] = [];

async function startRunner() {
  const config = parseRunnerConfig({
    AGENT_SESSIONS_SERVER_URL: t.server.url,
    AGENT_SESSIONS_RUNNER_TOKEN: RUNNER_TOKEN,
    AGENT_SESSIONS_RUNNER_DATA_DIR: dataDir,
    // The model gateway on loopback: the test Agent has a model.
    AGENT_SESSIONS_GATEWAY_ADDRESS: "127.0.0.1:0",
    AGENT_SESSIONS_RUNNER_NAME: "embedded",
    AGENT_SESSIONS_ENGINE: "docker",
  });
  const { driver, counts } = driverOf(machine);
  const runner = new Runner(config, driver, () => {});
  runners.push(runner);
  await runner.start();
  return { runner, counts, driver };
}

async function call(method: string, path: string, body?: unknown): Promise<{ status: number; body: Json }> {
  const response = await fetch(`${t.server.url}${path}`, {
    method,
    headers: { authorization: `Bearer ${ADMIN_TOKEN}`, "content-type": "application/json" },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });
  return { status: response.status, body: await response.json() };
}

async function ready(): Promise<Json> {
  const end = Date.now() + 10_000;
  for (;;) {
    const s = (await call("GET", `${BASE}/chat`)).body;
    if (s.status.phase === "Ready") return s;
    if (Date.now() > end) throw new Error(`not Ready: ${JSON.stringify(s.status)}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

async function phase(want: string): Promise<Json> {
  const end = Date.now() + 10_000;
  for (;;) {
    const s = (await call("GET", `${BASE}/chat`)).body;
    if (s.status.phase === want) return s;
    if (Date.now() > end) throw new Error(`not ${want}: ${JSON.stringify(s.status)}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

/** The runner process ends; resolves once the server saw its link go (the session not Ready). */
async function stopRunner(): Promise<void> {
  runners[0]?.stop();
  const end = Date.now() + 10_000;
  while ((await call("GET", `${BASE}/chat`)).body.status.phase === "Ready") {
    if (Date.now() > end) throw new Error("still Ready after the runner went");
    await new Promise((r) => setTimeout(r, 25));
  }
}

const ask = (id: string) => call("POST", `${BASE}/chat/requests`, { input: "hi", id });

beforeEach(async () => {
  adapter = createServer((req, res) => {
    if (req.url === "/readyz") return res.writeHead(200).end("{}");
    const token = (req.headers.authorization ?? "").replace(/^Bearer /, "");
    seenTokens.push(token);
    if (![...machine.stackTokens.values()].includes(token)) return res.writeHead(401).end("{}");
    const now = new Date().toISOString();
    req.resume();
    req.on("end", () =>
      res.writeHead(200, { "content-type": "application/json" }).end(
        JSON.stringify({
          id: "r",
          outcome: "succeeded",
          output: "hello",
          usage: "unavailable",
          started_at: now,
          finished_at: now,
        }),
      ),
    );
  });
  await new Promise<void>((r) => adapter.listen(0, "127.0.0.1", r));
  machine = {
    ...fakeMachine(),
    endpoint: `127.0.0.1:${(adapter.address() as AddressInfo).port}`,
  };
  t = await startTestServer();
  dataDir = `${t.dataDir}/runner`;
  seenTokens.length = 0;
  const { counts } = await startRunner();
  const created = await call("PUT", `${BASE}/chat`, {
    apiVersion: "agent-sessions.dev/v1alpha1",
    kind: "HarnessSession",
    metadata: { name: "chat" },
    spec: { agentRef: "alice", runtimeRef: "reference" },
  });
  expect(created.status).toBe(201);
  await ready();
  expect(counts.provisions).toBe(1);
  expect((await ask("before")).status).toBe(200);
});

afterEach(async () => {
  for (const r of runners.splice(0)) r.stop();
  await t.close();
  await new Promise((r) => adapter.close(r));
});

describe("a runner restarted on the same data dir", () => {
  it("serves a workspace whose workload still runs again: its agent started anew, the adapter token read back from the stack, no new provision", async () => {
    await stopRunner(); // the process is gone: its tokens and agents with it
    const { counts } = await startRunner();
    const again = await ready();
    expect(again.status.conditions[0]).toMatchObject({ reason: "SessionReady" });
    const answered = await ask("after");
    expect(answered.status).toBe(200);
    expect(counts).toEqual({ provisions: 0, agentStarts: 1 });
    expect(new Set(seenTokens).size).toBe(1); // the same token before and after
  });

  it("brings back a workspace whose workload stopped meanwhile (an engine restart): re-provisioned by the server, the same session id", async () => {
    const before = await ready();
    await stopRunner();
    machine.running.clear(); // the engine restarted: no container runs
    const { counts } = await startRunner();
    const again = await ready();
    expect(again.status.sessionId).toBe(before.status.sessionId);
    expect(counts.provisions).toBe(1);
    expect((await ask("after")).status).toBe(200);
  });

  it("deleted after the server and its runner restarted (kill -9 serve): nothing runs afterwards and nothing is provisioned after the delete (issue 34 item 11a)", async () => {
    await ready();
    // serve died: its embedded runner with it; the workload outlives both.
    for (const r of runners.splice(0)) r.stop();
    await t.stop();
    t = await startTestServer({ dataDir: t.dataDir }, { agent: false });
    const { driver } = await startRunner();
    await ready();
    const provisionsBefore = driver.provisions.length;
    const deleted = await call("DELETE", `${BASE}/chat`);
    expect(deleted.status, JSON.stringify(deleted.body)).toBeLessThan(300);
    expect((await call("GET", `${BASE}/chat`)).status).toBe(404);
    // What a user checks 10 s later (docker ps): here, 2 s of what the server and runner do next.
    await new Promise((r) => setTimeout(r, 2_000));
    expect(driver.provisions.slice(provisionsBefore).map((p) => p.containerName)).toEqual([]);
    expect([...machine.running]).toEqual([]);
  });

  it("keeps a workload frozen when it ended frozen: Paused on the server, in its paused set; a request wakes it (issue 37)", async () => {
    await call("PATCH", `${BASE}/chat`, { spec: { desiredState: "paused" } });
    const paused = await phase("Paused");
    const container: string = paused.status.containerName;
    expect(machine.paused.has(container)).toBe(true);
    for (const r of runners.splice(0)) r.stop(); // the process is gone; the engine keeps it frozen
    const { counts } = await startRunner();
    // Its agent was started again (thawed for that alone), and it is frozen as before.
    expect(counts.agentStarts).toBe(1);
    expect(machine.paused.has(container)).toBe(true);
    expect((await phase("Paused")).status.sessionId).toBe(paused.status.sessionId);
    // The restarted runner knows it froze it: the wake's unpause thaws it, and the request is served.
    await call("PATCH", `${BASE}/chat`, { spec: { desiredState: "running" } });
    await phase("Ready");
    expect(machine.paused.has(container)).toBe(false);
    expect((await ask("after")).status).toBe(200);
    expect(counts.provisions).toBe(0);
  });
});
