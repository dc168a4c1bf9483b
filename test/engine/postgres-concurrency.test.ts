/**
 * What only PostgreSQL can show: several server replicas (here: several pools, each a replica's
 * connections) over one database. Uniqueness and ordering are the database's, not one process's.
 */
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { PostgresDatabase } from "../../proxy/store/postgres-database.ts";
import { POSTGRES_MIGRATIONS } from "../../proxy/store/postgres-migrations.ts";
import { PostgresStore } from "../../proxy/store/postgres-store.ts";
import type { StoredFrame } from "../../proxy/store/store.ts";
import { dropSchema, freshSchema, testbedDatabaseUrl } from "../support/store/store-backends.ts";
import { workspace } from "../support/store/store-contract.ts";

let url: string;
let schema: string;
const opened: PostgresDatabase[] = [];
const open = async () => {
  const db = await PostgresDatabase.open(url, { schema, maxConnections: 10 });
  opened.push(db);
  return db;
};
beforeEach(() => {
  url = testbedDatabaseUrl();
  schema = freshSchema();
});
afterEach(async () => {
  for (const db of opened.splice(0)) await db.close();
  await dropSchema(url, schema);
});

describe("PostgreSQL store under concurrent replicas", () => {
  it("of 100 concurrent inserts of one client_request_id from two pools, exactly one wins", async () => {
    const replicas = [new PostgresStore(await open()), new PostgresStore(await open())];
    const results = await Promise.allSettled(
      Array.from({ length: 100 }, (_, i) =>
        replicas[i % 2]?.insertWorkspace(
          workspace({ container_name: `as-storm-${i}`, workstream: `w-${i}`, client_request_id: "storm" }),
        ),
      ),
    );
    expect(results.filter((r) => r.status === "fulfilled")).toHaveLength(1);
    const refused = results.filter((r) => r.status === "rejected");
    expect(refused).toHaveLength(99);
    for (const r of refused)
      expect((r as PromiseRejectedResult).reason).toMatchObject({ name: "StoreConflictError" });
    expect(await replicas[1]?.listWorkspaces()).toHaveLength(1);
  });

  it("of 100 concurrent claims of one idempotency key from two pools, exactly one claims it; the rest see its record", async () => {
    const replicas = [new PostgresStore(await open()), new PostgresStore(await open())];
    const results = await Promise.all(
      Array.from({ length: 100 }, (_, i) =>
        replicas[i % 2]?.claimIdempotencyKey({
          scope: "ProvisionAgentWorkspace",
          key: "storm",
          fingerprint: `f-${i}`,
          container_name: `as-storm-${i}`,
        }),
      ),
    );
    const winners = results.flatMap((r, i) => (r?.claimed ? [i] : []));
    expect(winners).toHaveLength(1);
    const winner = winners[0];
    for (const r of results)
      if (r && !r.claimed)
        expect(r.existing).toMatchObject({
          fingerprint: `f-${winner}`,
          container_name: `as-storm-${winner}`,
        });
  });

  it("a reader following the global frame id misses no frame while two replicas append to ten sessions", async () => {
    const replicas = [new PostgresStore(await open()), new PostgresStore(await open())];
    const sessions = Array.from({ length: 10 }, (_, i) => `s${i}`);
    for (const id of sessions)
      await replicas[0]?.insertSession({
        session_id: id,
        container_name: "as-default-w",
        agent_ref: "default/alice",
        runner_id: "runner-1",
        state: "STARTING",
      });
    let writing = true;
    const seen: StoredFrame[] = [];
    const reader = (async () => {
      let cursor = 0;
      for (;;) {
        const done = !writing;
        const page = await replicas[1]?.readFrames({ after: cursor, limit: 1_000 });
        for (const f of page ?? []) seen.push(f);
        cursor = seen.at(-1)?.id ?? cursor;
        if (done) return;
      }
    })();
    await Promise.all(
      sessions.map(async (id, i) => {
        for (let n = 0; n < 30; n++)
          await replicas[i % 2]?.appendFrame(id, {
            type: "delta",
            ts: new Date().toISOString(),
            payload: { n },
          });
      }),
    );
    writing = false;
    await reader;
    expect(seen).toHaveLength(300);
    const ids = seen.map((f) => f.id);
    expect(ids).toEqual([...ids].sort((a, b) => a - b));
    expect(new Set(ids).size).toBe(300);
    for (const id of sessions)
      expect(seen.filter((f) => f.frame.session_id === id).map((f) => f.frame.seq)).toEqual(
        Array.from({ length: 30 }, (_, n) => n + 1),
      );
  });
});

describe("PostgreSQL migrations", () => {
  it("four processes opening one new database at once apply each migration once, and a reopen applies none", async () => {
    const dbs = await Promise.all([open(), open(), open(), open()]);
    const versions = await dbs[0]?.all("SELECT version FROM schema_migrations ORDER BY version");
    expect(versions?.map((row) => Number(row.version))).toEqual(POSTGRES_MIGRATIONS.map((m) => m.version));
    const before = await dbs[0]?.all("SELECT version, applied_at FROM schema_migrations ORDER BY version");
    await open();
    expect(await dbs[1]?.all("SELECT version, applied_at FROM schema_migrations ORDER BY version")).toEqual(
      before,
    );
  });

  it("refuses a schema name that is not a plain identifier", async () => {
    await expect(PostgresDatabase.open(url, { schema: "x; DROP TABLE y" })).rejects.toThrow(
      /invalid schema name/,
    );
  });
});
