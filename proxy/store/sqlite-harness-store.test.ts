import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Worker } from "node:worker_threads";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import type { Usage } from "../../contracts/adapter.ts";
import type { HarnessSessionSpec } from "../../contracts/harness-session.ts";
import { SqliteHarnessStore } from "./sqlite-harness-store.ts";

const spec: HarnessSessionSpec = {
  agentRef: "a",
  runtimeRef: "reference",
  desiredState: "running",
  idleTimeout: "5m",
  autoResume: false,
};
const T = (s: number) => new Date(Date.UTC(2026, 0, 1, 0, 0, s)).toISOString();
let dir: string;
let path: string;
let store: SqliteHarnessStore;

beforeEach(async () => {
  dir = mkdtempSync(join(tmpdir(), "harness-store-"));
  path = join(dir, "agent-sessions.db");
  store = new SqliteHarnessStore(path);
  await store.createHarnessSession({ namespace: "default", name: "chat", uid: "u", spec, conditions: [] });
});
afterEach(async () => {
  await store.close();
  rmSync(dir, { recursive: true, force: true });
});

const request = (id: string, now = T(1)) => ({
  namespace: "default",
  name: "chat",
  request_id: id,
  relay_id: `relay-${id}`,
  runner_id: "runner-1",
  container_name: "as-default-chat",
  now,
});

describe("HarnessSession accounting in SQLite", () => {
  it("admits requests only to a Ready session, and refuses a reused request id", async () => {
    expect(await store.beginRequest(request("r1"))).toMatchObject({ ok: false, reason: "not-ready" });
    expect(await store.beginRequest({ ...request("r1"), name: "nope" })).toEqual({
      ok: false,
      reason: "not-found",
    });
    await store.setObserved("default", "chat", { phase: "Ready" });
    expect(await store.beginRequest(request("r1"))).toMatchObject({ ok: true });
    expect(await store.beginRequest(request("r1"))).toEqual({ ok: false, reason: "duplicate" });
    const record = await store.getHarnessSession("default", "chat");
    expect(record).toMatchObject({ request_count: 1, active_requests: 1, last_activity_time: T(1) });
  });

  it("settles a request once: outcome, usage sums, and unavailable usage counted, never as zero", async () => {
    await store.setObserved("default", "chat", { phase: "Ready" });
    for (const id of ["ok", "nousage", "bad"]) await store.beginRequest(request(id));
    const finish = (id: string, outcome: "succeeded" | "failed", usage: Usage) =>
      store.finishRequest({ namespace: "default", name: "chat", request_id: id, outcome, usage, now: T(2) });
    expect(await finish("ok", "succeeded", { input_tokens: 7, output_tokens: 3 })).toBe(true);
    expect(await finish("ok", "succeeded", { input_tokens: 7, output_tokens: 3 })).toBe(false);
    expect(await finish("nousage", "succeeded", "unavailable")).toBe(true);
    expect(await finish("bad", "failed", "unavailable")).toBe(true);
    expect(await store.getHarnessSession("default", "chat")).toMatchObject({
      request_count: 3,
      active_requests: 0,
      error_count: 1,
      last_request_id: "bad",
      last_request_outcome: "failed",
      last_request_usage: "unavailable",
      input_tokens: 7,
      output_tokens: 3,
      usage_reported: 1,
      usage_unavailable: 2,
      last_activity_time: T(2),
    });
  });

  it("loses no increment when four threads admit and settle 50 requests each on one file", async () => {
    await store.setObserved("default", "chat", { phase: "Ready" });
    const moduleUrl = new URL("./sqlite-harness-store.ts", import.meta.url).href;
    const code = `
      const { workerData, parentPort } = require("node:worker_threads");
      import(workerData.moduleUrl).then(async ({ SqliteHarnessStore }) => {
        const store = new SqliteHarnessStore(workerData.path);
        for (let i = 0; i < 50; i++) {
          const id = "w" + workerData.worker + "-" + i;
          const base = { namespace: "default", name: "chat", request_id: id };
          const begun = await store.beginRequest({ ...base, relay_id: id, runner_id: "r", container_name: "c", now: new Date().toISOString() });
          if (!begun.ok) throw new Error("not admitted: " + begun.reason);
          await store.finishRequest({ ...base, outcome: i % 5 === 0 ? "failed" : "succeeded",
            usage: i % 2 ? "unavailable" : { input_tokens: 2, output_tokens: 1 }, now: new Date().toISOString() });
        }
        await store.close();
        parentPort.postMessage("done");
      }).catch((e) => { parentPort.postMessage("error: " + e.message); });
    `;
    const results = await Promise.all(
      [0, 1, 2, 3].map(
        (worker) =>
          new Promise<string>((resolve, reject) => {
            const w = new Worker(code, { eval: true, workerData: { moduleUrl, path, worker } });
            w.once("message", (m) => resolve(String(m)));
            w.once("error", reject);
          }),
      ),
    );
    expect(results).toEqual(["done", "done", "done", "done"]);
    expect(await store.getHarnessSession("default", "chat")).toMatchObject({
      request_count: 200,
      active_requests: 0,
      error_count: 40,
      input_tokens: 200,
      output_tokens: 100,
      usage_reported: 100,
      usage_unavailable: 100,
    });
  });

  it("drains for idleness only when still Ready, idle long enough and nothing is in flight", async () => {
    await store.setObserved("default", "chat", { phase: "Ready", last_activity_time: T(10) });
    await store.beginRequest(request("r1", T(10)));
    const idle = (cutoff: string) =>
      store.beginDraining("default", "chat", { conditions: [], idle: { cutoff } });
    expect(await idle(T(20))).toBe(false); // one in flight
    await store.finishRequest({
      namespace: "default",
      name: "chat",
      request_id: "r1",
      outcome: "succeeded",
      usage: "unavailable",
      now: T(15),
    });
    expect(await idle(T(14))).toBe(false); // active since the cutoff
    expect(await idle(T(15))).toBe(true);
    expect((await store.getHarnessSession("default", "chat"))?.phase).toBe("Draining");
    expect(await store.beginRequest(request("r2", T(16)))).toMatchObject({ ok: false, reason: "not-ready" });
    expect(await idle(T(30))).toBe(false); // no longer Ready
  });

  it("clears requests in flight since before the bound as failed, once", async () => {
    await store.setObserved("default", "chat", { phase: "Ready" });
    await store.beginRequest(request("old", T(1)));
    await store.beginRequest(request("new", T(50)));
    expect(await store.reapStaleRequests(T(10), T(60))).toBe(1);
    expect(await store.reapStaleRequests(T(10), T(61))).toBe(0);
    expect(await store.getHarnessSession("default", "chat")).toMatchObject({
      active_requests: 1,
      error_count: 1,
      usage_unavailable: 1,
    });
    expect(await store.getRequest("default", "chat", "old")).toMatchObject({
      outcome: "failed",
      finished_at: T(60),
    });
    // The relay that finally finishes it cannot count it twice.
    expect(
      await store.finishRequest({
        namespace: "default",
        name: "chat",
        request_id: "old",
        outcome: "succeeded",
        usage: "unavailable",
        now: T(70),
      }),
    ).toBe(false);
  });

  it("writes specs optimistically: a stale generation changes nothing", async () => {
    const replaced = await store.replaceHarnessSpec(
      "default",
      "chat",
      { ...spec, desiredState: "stopped" },
      1,
    );
    expect(replaced?.generation).toBe(2);
    expect(await store.replaceHarnessSpec("default", "chat", spec, 1)).toBeUndefined();
    expect((await store.getHarnessSession("default", "chat"))?.spec.desiredState).toBe("stopped");
  });
});

describe("HarnessSession sweeps in SQLite", () => {
  const create = (name: string, over: Partial<HarnessSessionSpec> = {}) =>
    store.createHarnessSession({
      namespace: "default",
      name,
      uid: name,
      spec: { ...spec, ...over },
      conditions: [],
    });
  const settle = (name: string, patch: { phase: "Ready" | "Draining"; last_activity_time?: string }) =>
    store.setObserved("default", name, { observed_generation: 1, ...patch });

  beforeEach(async () => {
    for (const name of ["idle", "busy", "pending", "deleting", "recent", "untouched", "draining"])
      await create(name);
    await create("stopped", { desiredState: "stopped" });
    await create("never", { idleTimeout: "0" });
    await create("hourly", { idleTimeout: "1h" });
    for (const name of ["chat", "idle", "busy", "deleting", "stopped", "never", "hourly"])
      await settle(name, { phase: "Ready", last_activity_time: T(1) });
    await settle("recent", { phase: "Ready", last_activity_time: T(40) });
    await settle("untouched", { phase: "Ready" });
    await settle("draining", { phase: "Draining", last_activity_time: T(1) });
    await store.beginRequest({ ...request("r1"), name: "busy" });
    await store.markHarnessDeleting("default", "deleting", T(2));
  });

  it("idle candidates: Ready, desired running, not deleting, nothing in flight, quiet since their timeout's cutoff", async () => {
    const asked: string[] = [];
    const candidates = await store.listIdleCandidates((timeout) => {
      asked.push(timeout);
      return timeout === "5m" ? T(30) : timeout === "1h" ? T(0) : undefined;
    });
    expect(asked.sort()).toEqual(["0", "1h", "5m"]);
    expect(candidates.map((c) => c.name).sort()).toEqual(["chat", "idle", "untouched"]);
    expect(candidates.find((c) => c.name === "idle")).toEqual({
      namespace: "default",
      name: "idle",
      phase: "Ready",
      spec,
      active_requests: 0,
      last_activity_time: T(1),
      deletion_requested_at: undefined,
    });
  });

  it("unsettled: Pending, Draining or an unobserved spec, never one being deleted", async () => {
    expect((await store.listUnsettledHarnessSessions()).map((r) => r.name)).toEqual(["draining", "pending"]);
    await store.replaceHarnessSpec("default", "idle", { ...spec, desiredState: "stopped" }, 1);
    expect((await store.listUnsettledHarnessSessions()).map((r) => r.name)).toEqual([
      "draining",
      "idle",
      "pending",
    ]);
  });

  it("counts sessions by phase", async () => {
    expect(await store.countHarnessSessionsByPhase()).toEqual(
      new Map([
        ["Draining", 1],
        ["Pending", 1],
        ["Ready", 9],
      ]),
    );
  });
});

describe("restarts after unexpected exits", () => {
  it("keeps the restart count, the back-off and the exit handled, and reads them back after a reopen", async () => {
    const exit = { reason: "OOMKilled", time: T(3), session_id: "ses-1", seq: 12 };
    await store.setObserved("default", "chat", {
      restart_count: 2,
      consecutive_restarts: 2,
      restart_at: T(5),
      last_exit: exit,
    });
    await store.close();
    store = new SqliteHarnessStore(path);
    expect(await store.getHarnessSession("default", "chat")).toMatchObject({
      restart_count: 2,
      consecutive_restarts: 2,
      restart_at: T(5),
      last_exit: exit,
    });
  });

  it("a database made before restarts were recorded gains the columns, its sessions at zero restarts", async () => {
    await store.close();
    const { DatabaseSync } = await import("node:sqlite");
    const old = join(dir, "old.db");
    const db = new DatabaseSync(old);
    db.exec(`CREATE TABLE harness_sessions (
      namespace TEXT NOT NULL, name TEXT NOT NULL, uid TEXT NOT NULL,
      spec TEXT NOT NULL, generation INTEGER NOT NULL,
      created_at TEXT NOT NULL, updated_at TEXT NOT NULL, deletion_requested_at TEXT,
      observed_generation INTEGER NOT NULL DEFAULT 0,
      phase TEXT NOT NULL DEFAULT 'Pending', conditions TEXT NOT NULL DEFAULT '[]',
      container_name TEXT, session_id TEXT, resolved_image_digest TEXT, last_activity_time TEXT,
      request_count INTEGER NOT NULL DEFAULT 0, active_requests INTEGER NOT NULL DEFAULT 0,
      error_count INTEGER NOT NULL DEFAULT 0,
      last_request_id TEXT, last_request_outcome TEXT, last_request_usage TEXT,
      input_tokens INTEGER NOT NULL DEFAULT 0, output_tokens INTEGER NOT NULL DEFAULT 0,
      usage_reported INTEGER NOT NULL DEFAULT 0, usage_unavailable INTEGER NOT NULL DEFAULT 0,
      PRIMARY KEY (namespace, name))`);
    db.prepare(
      "INSERT INTO harness_sessions (namespace, name, uid, spec, generation, created_at, updated_at) VALUES (?, ?, ?, ?, 1, ?, ?)",
    ).run("default", "legacy", "u-old", JSON.stringify(spec), T(0), T(0));
    db.close();
    store = new SqliteHarnessStore(old);
    expect(await store.getHarnessSession("default", "legacy")).toMatchObject({
      restart_count: 0,
      consecutive_restarts: 0,
      restart_at: undefined,
      last_exit: undefined,
    });
  });
});
