/**
 * The store backends the contract suites (test/support/store/*-contract.ts) run against: each
 * gives every test an empty database of its own, and stores over new connections to it.
 */
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pg from "pg";
import type { HarnessStore } from "../../../proxy/store/harness-store.ts";
import { PostgresDatabase } from "../../../proxy/store/postgres-database.ts";
import { PostgresHarnessStore } from "../../../proxy/store/postgres-harness-store.ts";
import { PostgresStore } from "../../../proxy/store/postgres-store.ts";
import { PostgresTokenStore } from "../../../proxy/store/postgres-token-store.ts";
import { SqliteHarnessStore } from "../../../proxy/store/sqlite-harness-store.ts";
import { SqliteStore } from "../../../proxy/store/sqlite-store.ts";
import { SqliteTokenStore } from "../../../proxy/store/sqlite-token-store.ts";
import type { Store } from "../../../proxy/store/store.ts";
import type { TokenStore } from "../../../proxy/store/token-store.ts";

export type StoreOptions = { frameBufferSize?: number };

/** One test's database: empty at first; every `open…` is a new connection to the same data. */
export type TestDatabase = {
  openStore(options?: StoreOptions): Promise<Store>;
  openHarnessStore(): Promise<HarnessStore>;
  openTokenStore(): Promise<TokenStore>;
  /** Close every connection opened here and forget the data. */
  drop(): Promise<void>;
};

export type StoreBackend = { name: string; create(): Promise<TestDatabase> };

/** SQLite: a file in a temporary directory. */
export const sqliteBackend: StoreBackend = {
  name: "SQLite",
  async create() {
    const dir = mkdtempSync(join(tmpdir(), "store-contract-"));
    const path = join(dir, "agent-sessions.db");
    const opened: { close(): Promise<void> }[] = [];
    const track = <T extends { close(): Promise<void> }>(store: T): T => {
      opened.push(store);
      return store;
    };
    return {
      openStore: async (options = {}) => track(new SqliteStore(path, options)),
      openHarnessStore: async () => track(new SqliteHarnessStore(path)),
      openTokenStore: async () => track(new SqliteTokenStore(path)),
      async drop() {
        for (const store of opened.splice(0)) await store.close();
        rmSync(dir, { recursive: true, force: true });
      },
    };
  },
};

/**
 * The test bed's database (`scripts/testbed up postgres`). Never skipped: without
 * AGENT_SESSIONS_TESTBED_DATABASE_URL this throws, and the suite fails saying so.
 */
export function testbedDatabaseUrl(): string {
  const url = process.env.AGENT_SESSIONS_TESTBED_DATABASE_URL;
  if (!url)
    throw new Error(
      "AGENT_SESSIONS_TESTBED_DATABASE_URL is not set: run `scripts/testbed up postgres` and " +
        'eval "$(scripts/testbed env)" (the engine tier\'s global setup does both)',
    );
  return url;
}

/** A fresh schema name: parallel test files (and runs) never share tables. */
export function freshSchema(): string {
  return `test_${randomBytes(6).toString("hex")}`;
}

/** Forget a test schema and all in it. */
export async function dropSchema(url: string, schema: string): Promise<void> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    await client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
  } finally {
    await client.end();
  }
}

/** PostgreSQL: a schema of its own in the test bed's database; each `open…` its own pool. */
export const postgresBackend: StoreBackend = {
  name: "PostgreSQL",
  async create() {
    const url = testbedDatabaseUrl();
    const schema = freshSchema();
    const pools: PostgresDatabase[] = [];
    const pool = async () => {
      const db = await PostgresDatabase.open(url, { schema, maxConnections: 4 });
      pools.push(db);
      return db;
    };
    return {
      openStore: async (options = {}) => new PostgresStore(await pool(), options),
      openHarnessStore: async () => new PostgresHarnessStore(await pool()),
      openTokenStore: async () => new PostgresTokenStore(await pool()),
      async drop() {
        for (const db of pools.splice(0)) await db.close();
        await dropSchema(url, schema);
      },
    };
  },
};

/**
 * A database of its own in the test bed's PostgreSQL (for a whole server, which keeps its tables
 * in `public`): its URL, and `drop` to forget it. The test bed's role may create databases.
 */
export async function freshDatabase(): Promise<{ url: string; drop(): Promise<void> }> {
  const base = testbedDatabaseUrl();
  const name = freshSchema();
  const admin = new pg.Client({ connectionString: base });
  await admin.connect();
  try {
    await admin.query(`CREATE DATABASE ${name}`);
  } finally {
    await admin.end();
  }
  const url = new URL(base);
  url.pathname = `/${name}`;
  return {
    url: url.toString(),
    async drop() {
      const client = new pg.Client({ connectionString: base });
      await client.connect();
      try {
        await client.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      } finally {
        await client.end();
      }
    },
  };
}
