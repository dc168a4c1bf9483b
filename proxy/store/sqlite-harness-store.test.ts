import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Worker } from "node:worker_threads";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import type { HarnessSessionSpec } from "../../contracts/harness-session.ts";
import { describeHarnessStoreContract } from "../../test/support/store/harness-store-contract.ts";
import { sqliteBackend } from "../../test/support/store/store-backends.ts";
import { SqliteHarnessStore } from "./sqlite-harness-store.ts";

describeHarnessStoreContract(sqliteBackend);

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

describe("SqliteHarnessStore on one file from several threads and releases", () => {
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

  it("a database made before restarts and gateway usage were recorded gains the columns, its sessions at zero", async () => {
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
      gateway_input_tokens: 0,
      gateway_reported: 0,
      gateway_unavailable: 0,
    });
  });
});
