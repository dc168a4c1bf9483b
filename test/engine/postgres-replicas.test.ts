/**
 * Issue 20, several `serve` replicas over one PostgreSQL database, with real parts only: two
 * `serve --no-runner` processes (A, started first, takes the controllers' lease; B) over the test
 * bed's PostgreSQL, one `agent-sessions runner` process attached to B, on the test bed's dockerd.
 *
 * Shown: 100 concurrent ProvisionAgentWorkspace with one client_request_id spread over both
 * replicas make exactly one container; HarnessSessions created through A (their provisions are
 * forwarded to the runner through B), requests through B, a follower of the events on A; then
 * `kill -9` of A (the lease holder) mid-traffic: B holds the lease within LEASE_TAKEOVER_MS, no
 * session is lost, no container duplicated, the follower that reconnects to B with Last-Event-ID
 * misses no frame, and the idle stop of a session still happens (on B).
 */
import { randomBytes } from "node:crypto";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type ModelServer, startModelServer } from "../fixtures/model-server.ts";
import { containersOf, removeEverything, SessionFollower, setUpNamespace } from "../support/agent-system.ts";
import { freshDatabase } from "../support/store/store-backends.ts";
import { BRIDGE_IP, type Json, System, until } from "../support/system.ts";
import { applyTestbedEnv } from "../support/testbed.ts";

applyTestbedEnv();

const NS = `rep-${randomBytes(3).toString("hex")}`;
const API = "agent-sessions.dev/v1alpha1";
const SESSIONS = `/v1/namespaces/${NS}/harnesssessions`;
const READY_MS = 300_000;
/**
 * The bound stated for the lease to move: PostgreSQL ends a killed replica's session (and its
 * advisory locks) as soon as the socket closes; the other replica tries every 1 s.
 */
const LEASE_TAKEOVER_MS = 5_000;

const admin = `admin-${randomBytes(12).toString("hex")}`;
const runnerToken = `runner-${randomBytes(12).toString("hex")}`;
let database: { url: string; drop(): Promise<void> };
let model: ModelServer;
let a: System;
let b: System;

/** A replica over the shared database; both replicas hold the same admin and runner tokens. */
function replica(url: string): System {
  const dataDir = mkdtempSync(join(tmpdir(), "as-replica-"));
  mkdirSync(join(dataDir, "server"), { recursive: true });
  writeFileSync(join(dataDir, "server", "admin-token"), admin, { mode: 0o600 });
  writeFileSync(join(dataDir, "server", "runner-token"), runnerToken, { mode: 0o600 });
  return new System(dataDir, {
    AGENT_SESSIONS_DATABASE_URL: url,
    AGENT_SESSIONS_REATTACH_WINDOW_MS: "20000",
    AGENT_SESSIONS_IDLE_CHECK_MS: "500",
  });
}

const logsOf = (s: System) => (s.server?.logs ?? []).join("");

beforeAll(async () => {
  database = await freshDatabase();
  model = await startModelServer(BRIDGE_IP, 0);
  a = replica(database.url);
  b = replica(database.url);
  await a.startServer();
  await until("A holds the controllers' lease", () => logsOf(a).includes("took the controllers' lease"));
  await b.startServer();
  await b.startRunner(); // the runner dials B only
  await setUpNamespace(a, NS, []);
  const agent = await a.call("PUT", `/v1/namespaces/${NS}/agents/assistant`, {
    apiVersion: API,
    kind: "Agent",
    metadata: { name: "assistant", namespace: NS },
    spec: {
      runtimeRef: "reference",
      credentials: [{ name: "MODEL_API_KEY", value: `sk-rep-${randomBytes(8).toString("hex")}` }],
      model: { baseUrl: model.url, name: "tiny" },
      egress: [{ cidr: `${BRIDGE_IP}/32`, port: model.port }],
    },
  });
  expect(agent.status, JSON.stringify(agent.body)).toBe(201);
}, 120_000);

afterAll(async () => {
  if (b?.server) {
    for (const name of ["chat", "idle"]) await b.call("DELETE", `${SESSIONS}/${name}`).catch(() => undefined);
    await until(
      "sessions deleted",
      async () => (await b.call("GET", SESSIONS)).body.items?.length === 0,
      120_000,
    ).catch(() => undefined);
  }
  const logs = [a?.server, b?.server, b?.runner].map((p) => (p?.logs ?? []).join("")).join("\n---\n");
  if (b) writeFileSync(join(b.dataDir, "replicas.log"), logs);
  await b?.stop();
  await a?.stop();
  await model?.close();
  if (b) {
    const forced = await removeEverything(b, NS, []);
    if (forced.length > 0) console.warn(`replicas: forced removal of ${forced.join(", ")}`);
  }
  for (const s of [a, b]) if (s) rmSync(s.dataDir, { recursive: true, force: true });
  await database?.drop();
}, 300_000);

async function session(s: System, name: string): Promise<Json> {
  const got = await s.call("GET", `${SESSIONS}/${name}`);
  if (got.status !== 200) throw new Error(`GET ${name}: ${got.status} ${JSON.stringify(got.body)}`);
  return got.body;
}

const ready = (s: Json) => s.status.conditions.find((c: Json) => c.type === "Ready");

async function readyOn(s: System, name: string): Promise<Json> {
  return until(
    `${name} Ready`,
    async () => {
      const got = await session(s, name);
      if (got.status.phase === "Failed") throw new Error(`${name} Failed: ${JSON.stringify(ready(got))}`);
      return got.status.phase === "Ready" ? got : undefined;
    },
    READY_MS,
  );
}

describe("two serve replicas over one PostgreSQL database, one runner", () => {
  it("100 concurrent provisions with one client_request_id over both replicas make exactly one container", async () => {
    const replies = await Promise.all(
      Array.from({ length: 100 }, (_, i) =>
        (i % 2 === 0 ? a : b).rpc("ProvisionAgentWorkspace", {
          agent_ref: `${NS}/assistant`,
          workstream: "storm",
          client_request_id: "storm-1",
        }),
      ),
    );
    for (const reply of replies) expect(reply.status, JSON.stringify(reply.body)).toBe(200);
    const names = new Set(replies.map((r) => r.body.container_name));
    expect(names.size).toBe(1);
    const [container] = [...names] as string[];
    const containers = await containersOf(NS);
    expect(containers.map((c) => c.name)).toEqual([container]);
    const removed = await b.rpc("RemoveAgentWorkspace", { container_name: container });
    expect(removed.status, JSON.stringify(removed.body)).toBe(200);
    expect(await containersOf(NS)).toEqual([]);
  }, 600_000);

  it("created through A, served through B: kill -9 of the lease holder A loses no session, container or frame, and idle stops still happen", async () => {
    for (const [name, idleTimeout] of [
      ["chat", "10m"],
      ["idle", "40s"],
    ] as const) {
      const created = await a.call("PUT", `${SESSIONS}/${name}`, {
        apiVersion: API,
        kind: "HarnessSession",
        metadata: { name, namespace: NS },
        spec: { agentRef: "assistant", runtimeRef: "reference", idleTimeout },
      });
      expect(created.status, JSON.stringify(created.body)).toBe(201);
    }
    const chat = await readyOn(b, "chat");
    await readyOn(b, "idle");
    const sessionId = chat.status.sessionId as string;
    expect(sessionId).toBeTruthy();
    const containersBefore = (await containersOf(NS)).map((c) => c.name);
    expect(containersBefore).toHaveLength(2);

    // A follower of the chat session on A: the frames are written on B (the runner's replica).
    const front = { url: a.url, adminToken: admin } as System;
    const follower = new SessionFollower(front, sessionId);
    const ask = (i: number) => b.call("POST", `${SESSIONS}/chat/requests`, { input: `hello ${i}` });
    const first = await ask(0);
    expect(first.status, JSON.stringify(first.body)).toBe(200);
    await until("A's follower sees B's frames", () => follower.events.length > 2);

    // Traffic through B while A (the lease holder) is killed.
    let traffic = true;
    const outcomes: number[] = [];
    const load = (async () => {
      for (let i = 1; traffic; i++) outcomes.push((await ask(i)).status);
    })();
    await until("traffic flows", () => outcomes.length >= 2);
    const killedAt = Date.now();
    await a.kill("server", "SIGKILL");
    await until(
      "B holds the controllers' lease",
      () => logsOf(b).includes("took the controllers' lease"),
      LEASE_TAKEOVER_MS + 5_000,
    );
    const takeoverMs = Date.now() - killedAt;
    console.log(`replicas: lease moved to B ${takeoverMs} ms after kill -9 of A`);
    expect(takeoverMs).toBeLessThanOrEqual(LEASE_TAKEOVER_MS);
    front.url = b.url; // the follower reconnects to B with its Last-Event-ID
    const more = outcomes.length;
    await until("traffic continues on B", () => outcomes.length >= more + 3);
    traffic = false;
    await load;
    expect(
      outcomes.every((status) => status === 200),
      JSON.stringify(outcomes),
    ).toBe(true);

    // Every frame the store holds, read whole from B, is what the follower saw: no loss, no repeat.
    const all = new SessionFollower(b, sessionId);
    await until("the whole stream is read from B", async () => {
      const stored = all.events.length;
      return stored > 0 && follower.events.length === stored;
    });
    await all.close();
    await follower.close();
    const seqs = follower.events.map((e) => Number(e.id));
    expect(seqs).toEqual(Array.from({ length: seqs.length }, (_, i) => i + 1));
    expect(follower.gaps).toEqual([]);

    // No session lost, no container duplicated.
    expect((await session(b, "chat")).status.phase).toBe("Ready");
    expect((await session(b, "chat")).status.sessionId).toBe(sessionId);
    expect((await containersOf(NS)).map((c) => c.name)).toEqual(containersBefore);

    // The idle stop of `idle` happens on B, the new lease holder.
    const idled = await until(
      "idle is stopped for IdleTimeout",
      async () => {
        const got = await session(b, "idle");
        return ready(got)?.reason === "IdleTimeout" ? got : undefined;
      },
      120_000,
    );
    expect(ready(idled)).toMatchObject({ status: "False", reason: "IdleTimeout" });
  }, 900_000);
});
