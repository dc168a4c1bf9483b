/**
 * The Store contract (proxy/store/store.ts), one suite every implementation passes: SQLite in the
 * unit tier (proxy/store/sqlite-store.test.ts), PostgreSQL in the engine tier
 * (test/engine/postgres-store.test.ts).
 */
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { SessionSpec } from "../../../contracts/session-spec.ts";
import type { NewWorkspace, Store } from "../../../proxy/store/store.ts";
import { TEST_IMAGE } from "../../../proxy/testing/test-server.ts";
import type { StoreBackend, TestDatabase } from "./store-backends.ts";

const spec = SessionSpec.parse({
  namespace: "default",
  name: "w",
  engine: "docker",
  image: TEST_IMAGE,
  contract: "v1alpha2",
});
export const workspace = (over: Partial<NewWorkspace> = {}): NewWorkspace => ({
  container_name: "as-default-w",
  agent_ref: "default/alice",
  workstream: "",
  client_request_id: "req-1",
  runner_id: "runner-1",
  spec,
  adapter_token: "t",
  ...over,
});
const session = (id: string) => ({
  session_id: id,
  container_name: "as-default-w",
  agent_ref: "default/alice",
  runner_id: "runner-1",
  state: "STARTING" as const,
});

export function describeStoreContract(backend: StoreBackend): void {
  let db: TestDatabase;
  let store: Store;
  beforeEach(async () => {
    db = await backend.create();
    store = await db.openStore({ frameBufferSize: 3 });
  });
  afterEach(async () => {
    await db.drop();
  });

  describe(`${backend.name} Store`, () => {
    it("refuses a second workspace with the same client_request_id, container or (agent, workstream)", async () => {
      await store.insertWorkspace(workspace());
      for (const clash of [
        { container_name: "other", workstream: "x" },
        { client_request_id: "req-2", workstream: "x" },
        { container_name: "other", client_request_id: "req-2" },
      ])
        await expect(store.insertWorkspace(workspace(clash))).rejects.toMatchObject({
          name: "StoreConflictError",
        });
      expect(await store.listWorkspaces()).toHaveLength(1);
    });

    it("keeps a workspace's seeded commit once recorded: an update without one leaves it (issue 34 item 12)", async () => {
      const fresh = await store.insertWorkspace(workspace());
      expect(fresh.seeded_commit).toBeUndefined();
      const commit = "0123456789abcdef0123456789abcdef01234567";
      expect(
        await store.updateWorkspace("as-default-w", { status: "ready", seeded_commit: commit }),
      ).toMatchObject({ status: "ready", seeded_commit: commit });
      // A later provision fetched nothing (the checkout was there): the recorded one stays.
      await store.updateWorkspace("as-default-w", { status: "provisioning" });
      expect(await store.updateWorkspace("as-default-w", { status: "ready" })).toMatchObject({
        seeded_commit: commit,
      });
      expect(await store.getWorkspace("as-default-w")).toMatchObject({ seeded_commit: commit });
      expect(await store.listWorkspaces()).toMatchObject([{ seeded_commit: commit }]);
    });

    it("reads a workspace's relay route narrowly: its runner, whether it streams, its session protocol", async () => {
      expect(await store.getRelayRoute("as-default-w")).toBeUndefined();
      await store.insertWorkspace(workspace());
      expect(await store.getRelayRoute("as-default-w")).toEqual({
        container_name: "as-default-w",
        runner_id: "runner-1",
        agent_ref: "default/alice",
        streaming: false,
        protocol: undefined,
      });
      await store.insertWorkspace(
        workspace({
          container_name: "as-default-chat",
          workstream: "chat",
          client_request_id: "req-2",
          runner_id: "runner-2",
          spec: { ...spec, streaming: true, session: { protocol: "openai-chat", port: 8642 } },
        }),
      );
      expect(await store.getRelayRoute("as-default-chat")).toEqual({
        container_name: "as-default-chat",
        runner_id: "runner-2",
        agent_ref: "default/alice",
        streaming: true,
        protocol: "openai-chat",
      });
    });

    it("keeps a fork's seeded snapshot once recorded, beside the seeded commit (issue 38)", async () => {
      expect((await store.insertWorkspace(workspace())).seeded_snapshot).toBeUndefined();
      await store.updateWorkspace("as-default-w", { status: "ready", seeded_snapshot: "ss-default--s1" });
      await store.updateWorkspace("as-default-w", { status: "provisioning" });
      expect(await store.updateWorkspace("as-default-w", { status: "ready" })).toMatchObject({
        seeded_snapshot: "ss-default--s1",
        seeded_commit: undefined,
      });
      expect(await store.getWorkspace("as-default-w")).toMatchObject({ seeded_snapshot: "ss-default--s1" });
    });

    it("keeps SessionSnapshots apart from the other kinds, created once, their status replaced (issue 38)", async () => {
      const snapshot = {
        apiVersion: "agent-sessions.dev/v1alpha1" as const,
        kind: "SessionSnapshot" as const,
        metadata: {
          name: "s1",
          namespace: "default",
          uid: "u1",
          creationTimestamp: "2026-12-06T00:00:00.000Z",
        },
        spec: {
          sessionRef: "chat",
          agentRef: "alice",
          runtimeRef: "reference",
          resolvedImageDigest: "sha256:a",
        },
        status: { phase: "Pending" as const, message: "being taken" },
      };
      expect((await store.putResource(snapshot, { ifAbsent: true })).created).toBe(true);
      expect((await store.putResource(snapshot, { ifAbsent: true })).created).toBe(false);
      await store.putResource({ ...snapshot, status: { phase: "Ready", message: "taken", sizeBytes: 5 } });
      expect(await store.getResource("SessionSnapshot", "default", "s1")).toMatchObject({
        status: { phase: "Ready", sizeBytes: 5 },
      });
      expect(await store.getResource("Agent", "default", "s1")).toBeUndefined();
      expect(await store.listResources("SessionSnapshot", "default")).toHaveLength(1);
      expect(await store.listResources("Agent", "default")).toHaveLength(0);
      expect((await store.deleteResource("SessionSnapshot", "default", "s1"))?.metadata.name).toBe("s1");
      expect(await store.listResources("SessionSnapshot", undefined)).toEqual([]);
    });

    it("binds a runner name to one credential hash: claimed once, replaced by an admin, deleted only when still current", async () => {
      expect(await store.claimRunnerCredential("r1", "h1")).toBe(true);
      expect(await store.claimRunnerCredential("r1", "h2")).toBe(false);
      expect(await store.findRunnerCredential("h1")).toBe("r1");
      expect(await store.findRunnerCredential("h2")).toBeUndefined();
      await store.replaceRunnerCredential("r1", "h3");
      expect(await store.findRunnerCredential("h1")).toBeUndefined();
      expect(await store.findRunnerCredential("h3")).toBe("r1");
      expect(await store.deleteRunnerCredential("r1", "h1")).toBe(false);
      expect(await store.findRunnerCredential("h3")).toBe("r1");
      expect(await store.deleteRunnerCredential("r1")).toBe(true);
      expect(await store.claimRunnerCredential("r1", "h4")).toBe(true);
    });

    it("claims an idempotency key once per scope", async () => {
      const key = { scope: "workspace", key: "req-1", fingerprint: "f", container_name: "c" };
      expect(await store.claimIdempotencyKey(key)).toEqual({ claimed: true });
      expect(await store.claimIdempotencyKey({ ...key, fingerprint: "g" })).toMatchObject({
        claimed: false,
        existing: { fingerprint: "f", container_name: "c" },
      });
      expect(await store.claimIdempotencyKey({ ...key, scope: "other" })).toEqual({ claimed: true });
    });

    it("numbers frames per session, keeps a bounded buffer, and keeps counting after trimming", async () => {
      await store.insertSession(session("s1"));
      await store.insertSession(session("s2"));
      for (let i = 0; i < 5; i++)
        await store.appendFrame("s1", { type: "delta", ts: new Date().toISOString(), payload: { i } });
      await store.appendFrame("s2", { type: "log", ts: new Date().toISOString(), payload: {} });
      const s1 = await store.readFrames({ sessionId: "s1", after: 0, limit: 100 });
      expect(s1.map((f) => f.frame.seq)).toEqual([3, 4, 5]);
      expect(s1.map((f) => f.frame.payload.i)).toEqual([2, 3, 4]);
      expect(
        (await store.readFrames({ sessionId: "s2", after: 0, limit: 100 })).map((f) => f.frame.seq),
      ).toEqual([1]);
      const global = await store.readFrames({ after: 0, limit: 100 });
      expect(global.map((f) => f.id)).toEqual([3, 4, 5, 6]);
      expect(
        await store.appendFrame("nobody", { type: "log", ts: new Date().toISOString(), payload: {} }),
      ).toBeUndefined();
    });

    it("resolves concurrent appends and transitions in frame id order (the journal publishes in that order)", async () => {
      const ids = ["s1", "s2", "s3", "s4"];
      for (const id of ids) await store.insertSession(session(id));
      const resolved: number[] = [];
      const calls: { i: number; id: number }[] = [];
      await Promise.all(
        Array.from({ length: 120 }, async (_, i) => {
          const id = ids[i % ids.length] ?? "s1";
          const stored =
            i === 60
              ? (await store.transitionSession(id, { state: "READY" }))?.frame
              : await store.appendFrame(id, { type: "delta", ts: new Date().toISOString(), payload: { i } });
          if (stored) {
            resolved.push(stored.id);
            calls.push({ i, id: stored.id });
          }
        }),
      );
      expect(resolved).toHaveLength(120);
      expect(resolved).toEqual([...resolved].sort((a, b) => a - b));
      // Ids follow call order, the transition in its place among the appends.
      expect(calls.sort((a, b) => a.id - b.id).map((c) => c.i)).toEqual(calls.map((_, k) => k));
    });

    it("resolves concurrent grouped appends (group-committed), plain appends and transitions in frame id order", async () => {
      const ids = ["s1", "s2", "s3", "s4"];
      for (const id of ids) await store.insertSession(session(id));
      const resolved: number[] = [];
      const calls: { i: number; id: number }[] = [];
      await Promise.all(
        Array.from({ length: 120 }, async (_, i) => {
          const id = ids[i % ids.length] ?? "s1";
          const stored =
            i === 60
              ? (await store.transitionSession(id, { state: "READY" }))?.frame
              : await store.appendFrame(
                  id,
                  { type: "delta", ts: new Date().toISOString(), payload: { i } },
                  { grouped: i % 3 !== 0 },
                );
          if (stored) {
            resolved.push(stored.id);
            calls.push({ i, id: stored.id });
          }
        }),
      );
      expect(resolved).toHaveLength(120);
      expect(resolved).toEqual([...resolved].sort((a, b) => a - b));
      // Ids follow call order, the transition in its place among the appends.
      expect(calls.sort((a, b) => a.id - b.id).map((c) => c.i)).toEqual(calls.map((_, k) => k));
    });

    it("stores a burst of concurrent appends over several sessions: each session's frames numbered in call order, an unknown session's not stored", async () => {
      const ids = ["s1", "s2", "s3"];
      for (const id of ids) await store.insertSession(session(id));
      const results = await Promise.all(
        Array.from({ length: 90 }, (_, i) =>
          store.appendFrame(i % 10 === 9 ? "nobody" : (ids[i % ids.length] ?? "s1"), {
            type: "delta",
            ts: new Date().toISOString(),
            payload: { i },
          }),
        ),
      );
      expect(results.filter((r) => r === undefined)).toHaveLength(9);
      for (const [k, id] of ids.entries()) {
        const calls = results.filter((_, i) => i % 3 === k && i % 10 !== 9);
        expect(calls.map((r) => r?.frame.session_id)).toEqual(calls.map(() => id));
        expect(calls.map((r) => r?.frame.seq)).toEqual(calls.map((_, n) => n + 1));
        // The buffer keeps the last three (as above): what their appends resolved with, as stored.
        const kept = await store.readFrames({ sessionId: id, after: 0, limit: 100 });
        expect(kept).toEqual(calls.slice(-3));
      }
    });

    it("transitions a session with its status frame in one step, once per state, honouring `from`", async () => {
      await store.insertSession(session("s1"));
      const ready = await store.transitionSession("s1", { state: "READY" });
      expect(ready).toMatchObject({
        previous: "STARTING",
        session: { state: "READY" },
        frame: { frame: { seq: 1, type: "status", payload: { state: "READY" } } },
      });
      expect(await store.transitionSession("s1", { state: "READY", reason: "again" })).toBeUndefined();
      expect(
        await store.transitionSession("s1", { state: "ERRORED", from: ["DISCONNECTED"] }),
      ).toBeUndefined();
      expect(
        await store.transitionSession("s1", { state: "ERRORED", reason: "OOMKilled", from: ["READY"] }),
      ).toMatchObject({
        session: { state: "ERRORED", reason: "OOMKilled" },
      });
    });

    it("forgets a workspace with its sessions, frames and keys", async () => {
      await store.insertWorkspace(workspace());
      await store.claimIdempotencyKey({
        scope: "workspace",
        key: "req-1",
        fingerprint: "f",
        container_name: "as-default-w",
      });
      await store.insertSession(session("s1"));
      await store.appendFrame("s1", { type: "log", ts: new Date().toISOString(), payload: {} });
      expect(await store.deleteWorkspace("as-default-w")).toBe(true);
      expect(await store.listSessions()).toEqual([]);
      expect(await store.readFrames({ after: 0, limit: 10 })).toEqual([]);
      expect(await store.getIdempotencyKey("workspace", "req-1")).toBeUndefined();
      expect(await store.deleteWorkspace("as-default-w")).toBe(false);
    });

    it("keeps a runner's id by name", async () => {
      const first = await store.registerRunner({
        runner_name: "r",
        engine: "docker",
        capacity: 1,
        labels: {},
      });
      const again = await store.registerRunner({
        runner_name: "r",
        engine: "kubernetes",
        capacity: 2,
        labels: { a: "b" },
      });
      expect(again).toMatchObject({
        runner_id: first.runner_id,
        engine: "kubernetes",
        capacity: 2,
        labels: { a: "b" },
      });
    });

    it("keeps a runner's drain flag across its reconnects, and finds runners by name or id", async () => {
      const a = await store.registerRunner({ runner_name: "a", engine: "docker", capacity: 1, labels: {} });
      await store.registerRunner({ runner_name: "b", engine: "docker", capacity: 1, labels: {} });
      expect(a.draining).toBe(false);
      expect(await store.setRunnerDraining(a.runner_id, true)).toMatchObject({
        runner_name: "a",
        draining: true,
      });
      // The runner says hello again (with other labels): the server's drain flag stays.
      const again = await store.registerRunner({
        runner_name: "a",
        engine: "docker",
        capacity: 3,
        labels: { zone: "x" },
      });
      expect(again).toMatchObject({
        runner_id: a.runner_id,
        capacity: 3,
        labels: { zone: "x" },
        draining: true,
      });
      expect((await store.listRunners()).map((r) => [r.runner_name, r.draining])).toEqual([
        ["a", true],
        ["b", false],
      ]);
      expect(await store.findRunner("a")).toMatchObject({ runner_id: a.runner_id });
      expect(await store.findRunner(a.runner_id)).toMatchObject({ runner_name: "a" });
      expect(await store.findRunner("nobody")).toBeUndefined();
      expect(await store.setRunnerDraining("runner-none", true)).toBeUndefined();
      expect(await store.setRunnerDraining(a.runner_id, false)).toMatchObject({ draining: false });
    });

    it("survives a reopen: a new connection reads what the old one wrote", async () => {
      await store.insertSession(session("s1"));
      await store.close();
      store = await db.openStore();
      expect(await store.getSession("s1")).toMatchObject({ state: "STARTING" });
    });
  });

  describe(`${backend.name} Store placement load`, () => {
    it("counts workspaces by runner without listing them, and forgets removed ones", async () => {
      expect(await store.countWorkspacesByRunner()).toEqual(new Map());
      const place = (i: number, runner_id: string) =>
        store.insertWorkspace(
          workspace({
            container_name: `c-${i}`,
            client_request_id: `r-${i}`,
            workstream: `w-${i}`,
            runner_id,
          }),
        );
      for (let i = 0; i < 3; i++) await place(i, "runner-1");
      await place(3, "runner-2");
      expect(await store.countWorkspacesByRunner()).toEqual(
        new Map([
          ["runner-1", 3],
          ["runner-2", 1],
        ]),
      );
      await store.deleteWorkspace("c-3");
      expect(await store.countWorkspacesByRunner()).toEqual(new Map([["runner-1", 3]]));
    });
  });

  describe(`${backend.name} Store session counts`, () => {
    it("counts sessions by state, following transitions", async () => {
      expect(await store.countSessionsByState()).toEqual(new Map());
      await store.insertWorkspace(workspace());
      for (const id of ["s1", "s2", "s3"]) await store.insertSession(session(id));
      await store.transitionSession("s1", { state: "READY" });
      await store.transitionSession("s2", { state: "READY" });
      await store.transitionSession("s2", { state: "ERRORED", reason: "AgentExited" });
      expect(await store.countSessionsByState()).toEqual(
        new Map([
          ["ERRORED", 1],
          ["READY", 1],
          ["STARTING", 1],
        ]),
      );
    });
    it("lists the sessions of some namespaces only: `team` is not `team-a`, none is nothing", async () => {
      await store.insertWorkspace(workspace());
      const refs = { s1: "team/alice", s2: "team-a/alice", s3: "other/alice", s4: "team/bob" };
      for (const [id, agent_ref] of Object.entries(refs))
        await store.insertSession({ ...session(id), agent_ref });
      const ids = async (namespaces: string[]) =>
        (await store.listSessions({ namespaces })).map((s) => s.session_id).sort();
      expect(await ids(["team"])).toEqual(["s1", "s4"]);
      expect(await ids(["team-a", "other"])).toEqual(["s2", "s3"]);
      expect(await ids([])).toEqual([]);
      // With a page (limit + 1 rows): the filter applies before the limit, not after.
      const page = await store.listSessions({ namespaces: ["team"] }, { limit: 1 });
      expect(page.map((s) => s.session_id)).toEqual(["s1", "s4"]);
    });
  });
}
