/**
 * The replica cluster (proxy/cluster/postgres-replica-cluster.ts) over the test bed's PostgreSQL:
 * two "replicas" in one process, each with its own pool, on one schema.
 */
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import pg from "pg";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { PostgresReplicaCluster } from "../../proxy/cluster/postgres-replica-cluster.ts";
import { LOCK_QUERY_DEADLINE_MS } from "../../proxy/cluster/postgres-session-locks.ts";
import type { RelayChunk } from "../../proxy/lifecycle/runner-directory.ts";
import { silentLogger } from "../../proxy/observability/log.ts";
import { DEDICATED_KEEPALIVE, PostgresDatabase } from "../../proxy/store/postgres-database.ts";
import { PostgresStore } from "../../proxy/store/postgres-store.ts";
import type { StoredFrame } from "../../proxy/store/store.ts";
import { dropSchema, freshSchema, testbedDatabaseUrl } from "../support/store/store-backends.ts";
import { until as untilValue } from "../support/until.ts";

/** Waits for `probe` to be truthy. */
const until = (what: string, probe: () => unknown, timeoutMs?: number) =>
  untilValue(what, async () => ((await probe()) ? true : undefined), timeoutMs);

const run = promisify(execFile);

/** Loopback packets matching `rule` are dropped until the returned function is called. */
async function dropOnLoopback(rule: string[]): Promise<() => Promise<void>> {
  const args = ["OUTPUT", "-o", "lo", "-p", "tcp", ...rule, "-j", "DROP"];
  await run("iptables", ["-w", "10", "-I", ...args]);
  return async () => {
    await run("iptables", ["-w", "10", "-D", ...args]);
  };
}

type Replica = {
  db: PostgresDatabase;
  store: PostgresStore;
  cluster: PostgresReplicaCluster;
  seen: StoredFrame[];
};

let schema: string;
const replicas: Replica[] = [];

async function replica(replicaId: string): Promise<Replica> {
  const db = await PostgresDatabase.open(testbedDatabaseUrl(), { schema, maxConnections: 4 });
  const store = new PostgresStore(db, { frameBufferSize: 1000 });
  const seen: StoredFrame[] = [];
  const cluster = await PostgresReplicaCluster.start({
    db,
    log: silentLogger,
    replicaId,
    listRunners: () => store.listRunners(),
    readFrames: (query) => store.readFrames(query),
    publish: (frame) => seen.push(frame),
    heartbeatMs: 200,
    replicaTtlMs: 1_000,
    leasePollMs: 200,
  });
  const r = { db, store, cluster, seen };
  replicas.push(r);
  return r;
}

async function close(r: Replica): Promise<void> {
  await r.cluster.close();
  await r.store.close();
  await r.db.close();
  replicas.splice(replicas.indexOf(r), 1);
}

beforeEach(() => {
  schema = freshSchema();
});
afterEach(async () => {
  for (const r of [...replicas]) await close(r);
  await dropSchema(testbedDatabaseUrl(), schema);
});

describe("PostgresReplicaCluster", () => {
  it("gives the controllers' lease to one replica, and to the other within a second once its holder is gone", async () => {
    const a = await replica("a");
    const b = await replica("b");
    expect(a.cluster.leads()).toBe(true);
    expect(b.cluster.leads()).toBe(false);
    const gone = Date.now();
    await close(a);
    await until("b leads", () => b.cluster.leads(), 5_000);
    expect(Date.now() - gone).toBeLessThan(1_500);
  });

  it("lets one replica at a time hold a key, whatever the characters in it", async () => {
    const a = await replica("a");
    const b = await replica("b");
    const key = "default/alice\0main";
    const order: string[] = [];
    let release: () => void = () => {};
    const held = new Promise<void>((resolve) => {
      release = resolve;
    });
    const first = a.cluster.locks("workspaces").run(key, async () => {
      order.push("a in");
      await held;
      order.push("a out");
    });
    await until("a holds the key", () => order.includes("a in"));
    const second = b.cluster.locks("workspaces").run(key, async () => {
      order.push("b in");
    });
    // Another key and another scope are free meanwhile.
    await b.cluster.locks("workspaces").run("other", async () => {});
    await b.cluster.locks("sessions").run(key, async () => {});
    await new Promise((r) => setTimeout(r, 200));
    expect(order).toEqual(["a in"]);
    release();
    await Promise.all([first, second]);
    expect(order).toEqual(["a in", "a out", "b in"]);
  });

  it("forwards a command to the replica a runner is attached to, its relay chunks back in order before the outcome", async () => {
    const a = await replica("a");
    const b = await replica("b");
    const runner = await b.store.registerRunner({
      runner_name: "r1",
      engine: "docker",
      capacity: 2,
      labels: {},
    });
    b.cluster.serveForwarded(async ({ runnerId, command, onChunk }) => {
      if (command.kind !== "relay")
        return { ok: false, error: { code: "UNIMPLEMENTED", message: "relay only" } };
      for (let i = 0; i < 5; i++) onChunk({ relay_id: command.relay_id, data: `part ${i}`, done: i === 4 });
      return { ok: true, result: { runner: runnerId } };
    });
    await b.cluster.linkAttached(runner.runner_id);
    await until("a sees the runner on b", async () => {
      await a.cluster.refreshLinks();
      return a.cluster.remoteLinks().get(runner.runner_id)?.replicaId === "b";
    });
    const chunks: RelayChunk[] = [];
    const outcome = await a.cluster.forward("b", {
      runnerId: runner.runner_id,
      command: {
        kind: "relay",
        container_name: "c1",
        relay_id: "rel-1",
        request: { id: "req-1", input: "hello", stream: true },
        timeout_ms: 5_000,
      },
      timeoutMs: 5_000,
      onChunk: (chunk) => chunks.push(chunk),
    });
    expect(outcome).toEqual({ ok: true, result: { runner: runner.runner_id } });
    expect(chunks.map((c) => c.data)).toEqual(["part 0", "part 1", "part 2", "part 3", "part 4"]);

    // A replica that dies with a command on its way answers UNAVAILABLE, not at the deadline.
    b.cluster.serveForwarded(() => new Promise(() => {}));
    const pending = a.cluster.forward("b", {
      runnerId: runner.runner_id,
      command: { kind: "stop", session_id: "s1" },
      timeoutMs: 60_000,
      onChunk: () => {},
    });
    await new Promise((r) => setTimeout(r, 300));
    await close(b);
    const started = Date.now();
    expect(await pending).toMatchObject({ ok: false, error: { code: "UNAVAILABLE" } });
    expect(Date.now() - started).toBeLessThan(5_000);
    expect(a.cluster.remoteLinks().size).toBe(0);
  });

  it("publishes the frames written on any replica to every replica, in the store's order", async () => {
    const a = await replica("a");
    const b = await replica("b");
    const runner = await a.store.registerRunner({
      runner_name: "r1",
      engine: "docker",
      capacity: 2,
      labels: {},
    });
    for (const id of ["s1", "s2"])
      await a.store.insertSession({
        session_id: id,
        container_name: `c-${id}`,
        agent_ref: "default/alice",
        runner_id: runner.runner_id,
        state: "STARTING",
      });
    for (let i = 0; i < 20; i++) {
      const [writer, session] = i % 2 === 0 ? [a, "s1"] : [b, "s2"];
      await writer.store.appendFrame(session, { type: "log", ts: new Date().toISOString(), payload: { i } });
      writer.cluster.frames.written();
    }
    for (const r of [a, b]) {
      await until("every frame arrives", () => r.seen.length === 20, 5_000);
      const ids = r.seen.map((f) => f.id);
      expect(ids).toEqual([...ids].sort((x, y) => x - y));
      expect(r.seen.map((f) => (f.frame.payload as { i: number }).i)).toEqual(
        Array.from({ length: 20 }, (_, i) => i),
      );
    }
  });

  it("a lease holder cut off from the database without a FIN gives the lease up first; the other takes it once the server drops the silent session", async () => {
    const a = await replica("a");
    const b = await replica("b");
    expect(a.cluster.leads()).toBe(true);
    const url = new URL(testbedDatabaseUrl());
    const observer = new pg.Client({ connectionString: url.toString() });
    await observer.connect();
    const lockConnection = async () =>
      (
        await observer.query(
          "SELECT client_port FROM pg_stat_activity WHERE application_name = 'agent-sessions locks a'",
        )
      ).rows.map((row) => Number(row.client_port));
    const [port] = await lockConnection();
    expect(port, "a's lock connection in pg_stat_activity").toBeGreaterThan(0);

    // Every packet of a's lock connection is lost (no FIN, no RST: a partition), and no new
    // connection to the database gets through, so a cannot come back by reconnecting.
    const heal: (() => Promise<void>)[] = [];
    const leaders: string[] = [];
    const sampler = setInterval(() => {
      const now = [a, b].filter((r) => r.cluster.leads()).map((r) => r.cluster.replicaId);
      leaders.push(now.join("+") || "none");
    }, 20);
    try {
      heal.push(await dropOnLoopback(["--sport", String(port)]));
      heal.push(await dropOnLoopback(["--dport", String(port)]));
      heal.push(await dropOnLoopback(["--dport", url.port, "--syn"]));
      const cut = Date.now();
      await until("a lets the lease go", () => !a.cluster.leads(), 10_000);
      const aGaveUp = Date.now() - cut;
      await until("b takes the lease", () => b.cluster.leads(), 20_000);
      const bTook = Date.now() - cut;
      console.log(`partition: a let the lease go after ${aGaveUp} ms, b took it after ${bTook} ms`);
      // a's own check (every 200 ms here) gives up at the statement deadline; the server ends the
      // silent session after its keepalive probes (DEDICATED_KEEPALIVE) and b's next try wins.
      expect(aGaveUp).toBeLessThanOrEqual(LOCK_QUERY_DEADLINE_MS + 1_500);
      const keepaliveMs =
        (DEDICATED_KEEPALIVE.idleS + DEDICATED_KEEPALIVE.intervalS * DEDICATED_KEEPALIVE.count) * 1_000;
      expect(bTook).toBeGreaterThan(aGaveUp);
      expect(bTook).toBeLessThanOrEqual(keepaliveMs + 4_000);
      expect(await lockConnection()).not.toContain(port);
    } finally {
      clearInterval(sampler);
      for (const undo of heal) await undo();
    }
    try {
      expect(leaders.filter((l) => l.includes("+"))).toEqual([]);
      // Healed: a connects again and stays a follower.
      await until("a's new lock connection", async () => (await lockConnection()).length > 0, 15_000);
      expect(a.cluster.leads()).toBe(false);
      expect(b.cluster.leads()).toBe(true);
    } finally {
      await observer.end();
    }
  });
});
