/**
 * The HarnessStore contract (proxy/store/harness-store.ts), one suite every implementation passes:
 * SQLite in the unit tier (proxy/store/sqlite-harness-store.test.ts), PostgreSQL in the engine tier
 * (test/engine/postgres-harness-store.test.ts).
 */
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import type { Usage } from "../../../contracts/adapter.ts";
import type { HarnessSessionSpec } from "../../../contracts/harness-session.ts";
import type { HarnessStore } from "../../../proxy/store/harness-store.ts";
import type { StoreBackend, TestDatabase } from "./store-backends.ts";

const spec: HarnessSessionSpec = {
  agentRef: "a",
  runtimeRef: "reference",
  desiredState: "running",
  idleTimeout: "5m",
  autoResume: false,
};
const T = (s: number) => new Date(Date.UTC(2026, 0, 1, 0, 0, s)).toISOString();

export function describeHarnessStoreContract(backend: StoreBackend): void {
  let db: TestDatabase;
  let store: HarnessStore;
  beforeEach(async () => {
    db = await backend.create();
    store = await db.openHarnessStore();
    await store.createHarnessSession({ namespace: "default", name: "chat", uid: "u", spec, conditions: [] });
  });
  afterEach(async () => {
    await db.drop();
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

  describe(`HarnessSession accounting in ${backend.name}`, () => {
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

    it("reads what admitting a request needs narrowly: phase, workspace and agent session", async () => {
      expect(await store.getServing("default", "nope")).toBeUndefined();
      expect(await store.getServing("default", "chat")).toEqual({
        namespace: "default",
        name: "chat",
        phase: "Pending",
        container_name: undefined,
        session_id: undefined,
      });
      await store.setObserved("default", "chat", {
        phase: "Ready",
        container_name: "as-default-chat",
        session_id: "s-1",
      });
      expect(await store.getServing("default", "chat")).toEqual({
        namespace: "default",
        name: "chat",
        phase: "Ready",
        container_name: "as-default-chat",
        session_id: "s-1",
      });
    });

    it("settles a request once: outcome, usage sums, and unavailable usage counted, never as zero", async () => {
      await store.setObserved("default", "chat", { phase: "Ready" });
      for (const id of ["ok", "nousage", "bad"]) await store.beginRequest(request(id));
      const finish = (id: string, outcome: "succeeded" | "failed", usage: Usage) =>
        store.finishRequest({
          namespace: "default",
          name: "chat",
          request_id: id,
          outcome,
          usage,
          now: T(2),
        });
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

    it("counts the gateway's model calls into the session on the workspace, apart from the adapter's claims, and keeps them across a reopen", async () => {
      await store.setObserved("default", "chat", { container_name: "as-default-chat" });
      const add = (usage: Usage) => store.addGatewayUsage("as-default-chat", usage);
      expect(await add({ input_tokens: 100, output_tokens: 20 })).toEqual({
        namespace: "default",
        name: "chat",
      });
      await add({ input_tokens: 50, output_tokens: 5 });
      await add("unavailable");
      expect(await store.addGatewayUsage("as-nobody", { input_tokens: 1, output_tokens: 1 })).toBeUndefined();
      await store.close();
      store = await db.openHarnessStore();
      expect(await store.getHarnessSession("default", "chat")).toMatchObject({
        gateway_input_tokens: 150,
        gateway_output_tokens: 25,
        gateway_reported: 2,
        gateway_unavailable: 1,
        input_tokens: 0,
        usage_reported: 0,
      });
    });

    it("loses no increment when four connections admit and settle 50 requests each at once", async () => {
      await store.setObserved("default", "chat", { phase: "Ready" });
      const connections = await Promise.all([0, 1, 2, 3].map(() => db.openHarnessStore()));
      await Promise.all(
        connections.map(async (connection, worker) => {
          for (let i = 0; i < 50; i++) {
            const id = `w${worker}-${i}`;
            const base = { namespace: "default", name: "chat", request_id: id };
            const begun = await connection.beginRequest({
              ...base,
              relay_id: id,
              runner_id: "r",
              container_name: "c",
              now: new Date().toISOString(),
            });
            if (!begun.ok) throw new Error(`not admitted: ${begun.reason}`);
            await connection.finishRequest({
              ...base,
              outcome: i % 5 === 0 ? "failed" : "succeeded",
              usage: i % 2 ? "unavailable" : { input_tokens: 2, output_tokens: 1 },
              now: new Date().toISOString(),
            });
          }
        }),
      );
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
      expect(await store.beginRequest(request("r2", T(16)))).toMatchObject({
        ok: false,
        reason: "not-ready",
      });
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

  describe(`HarnessSession sweeps in ${backend.name}`, () => {
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

    it("expiry candidates: a ttl or an expiresAt set, not being deleted, with their creation", async () => {
      await create("brief", { ttl: "30s" });
      await create("dated", { expiresAt: "2030-01-01T00:00:00Z" });
      await create("gone", { ttl: "1m" });
      await store.markHarnessDeleting("default", "gone", T(3));
      const candidates = await store.listExpiryCandidates();
      expect(candidates.map((c) => c.name).sort()).toEqual(["brief", "dated"]);
      const brief = candidates.find((c) => c.name === "brief");
      expect(brief?.spec.ttl).toBe("30s");
      expect(brief?.created_at).toBe((await store.getHarnessSession("default", "brief"))?.created_at);
    });

    it("unsettled: Pending, Draining or an unobserved spec, never one being deleted", async () => {
      expect((await store.listUnsettledHarnessSessions()).map((r) => r.name)).toEqual([
        "draining",
        "pending",
      ]);
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

  describe(`restarts after unexpected exits in ${backend.name}`, () => {
    it("keeps the restart count, the back-off and the exit handled, and reads them back after a reopen", async () => {
      const exit = { reason: "OOMKilled", time: T(3), session_id: "ses-1", seq: 12 };
      await store.setObserved("default", "chat", {
        restart_count: 2,
        consecutive_restarts: 2,
        restart_at: T(5),
        last_exit: exit,
      });
      await store.close();
      store = await db.openHarnessStore();
      expect(await store.getHarnessSession("default", "chat")).toMatchObject({
        restart_count: 2,
        consecutive_restarts: 2,
        restart_at: T(5),
        last_exit: exit,
      });
    });
  });
}
