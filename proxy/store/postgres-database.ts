import pg from "pg";
import { POSTGRES_MIGRATIONS } from "./postgres-migrations.ts";
import { type PageQuery, StoreConflictError } from "./store.ts";

export type PgRow = Record<string, unknown>;
/** What a statement runs on: the pool (one statement, autocommit) or a transaction's client. */
export type PgQueryable = {
  query(sql: string, params?: unknown[]): Promise<{ rows: PgRow[]; rowCount: number | null }>;
};

export type PostgresDatabaseOptions = {
  /**
   * The schema every table lives in (created when missing); tests give each run its own.
   * @default "public"
   */
  schema?: string;
  /** Connections of the pool. @default 10 */
  maxConnections?: number;
  /** How long a new connection may take before the query waiting for it fails. @default 10000 */
  connectTimeoutMs?: number;
  /**
   * An idle pooled connection failed (the server restarted, the network dropped it); the pool
   * replaces it on the next query. @default ignore
   */
  onIdleError?: (error: Error) => void;
};

/**
 * TCP keepalive of the dedicated connections (LISTEN, advisory locks), on both ends: a peer
 * silent for `idleS` is probed every `intervalS`; after `count` unanswered probes the connection
 * ends. The server thus drops a vanished replica's session, and its lease, within
 * idleS + intervalS × count seconds (8 s) of its last packet: later than the holder itself gives
 * the lease up (postgres-session-locks.ts, LOCK_QUERY_DEADLINE_MS).
 */
export const DEDICATED_KEEPALIVE = { idleS: 5, intervalS: 1, count: 3 } as const;

/**
 * One pool of connections to the server's PostgreSQL database, shared by every store in the
 * process. `open` applies the schema's migrations first (postgres-migrations.ts), so a store never
 * sees an old schema.
 */
export class PostgresDatabase {
  readonly #pool: pg.Pool;
  readonly #connection: { connectionString: string; connectTimeoutMs: number };
  readonly schema: string;
  #open = true;

  private constructor(
    pool: pg.Pool,
    schema: string,
    connection: { connectionString: string; connectTimeoutMs: number },
  ) {
    this.#pool = pool;
    this.schema = schema;
    this.#connection = connection;
  }

  /** Connect and migrate; a database that cannot be reached or migrated is an error here, not later. */
  static async open(
    connectionString: string,
    options: PostgresDatabaseOptions = {},
  ): Promise<PostgresDatabase> {
    const schema = options.schema ?? "public";
    if (!/^[a-z_][a-z0-9_]{0,62}$/.test(schema))
      throw new Error(`invalid schema name ${JSON.stringify(schema)}`);
    const pool = new pg.Pool({
      connectionString,
      max: options.maxConnections ?? 10,
      connectionTimeoutMillis: options.connectTimeoutMs ?? 10_000,
      // Every connection resolves unqualified table names in our schema only.
      options: `-c search_path=${schema}`,
    });
    // An idle connection the server drops (restart, network) must not crash the process.
    pool.on("error", (error) => options.onIdleError?.(error));
    const db = new PostgresDatabase(pool, schema, {
      connectionString,
      connectTimeoutMs: options.connectTimeoutMs ?? 10_000,
    });
    try {
      await db.#migrate();
    } catch (error) {
      await pool.end();
      throw error;
    }
    return db;
  }

  /**
   * A connection of its own, outside the pool, with the pool's schema: for what holds a session
   * (LISTEN, advisory locks held across statements) and must not wait behind pooled queries.
   * The caller ends it; an `error` listener is the caller's too.
   */
  async dedicatedClient(onError: (error: Error) => void, name = "agent-sessions"): Promise<pg.Client> {
    const client = new pg.Client({
      connectionString: this.#connection.connectionString,
      connectionTimeoutMillis: this.#connection.connectTimeoutMs,
      // Both ends find out when the other vanished without a FIN or RST (a lost network, a
      // frozen node): the server ends the session, and with it its advisory locks, once
      // DEDICATED_KEEPALIVE's probes go unanswered; this end errors likewise.
      keepAlive: true,
      keepAliveInitialDelayMillis: DEDICATED_KEEPALIVE.idleS * 1_000,
      application_name: name.slice(0, 63),
      options: [
        `-c search_path=${this.schema}`,
        `-c tcp_keepalives_idle=${DEDICATED_KEEPALIVE.idleS}`,
        `-c tcp_keepalives_interval=${DEDICATED_KEEPALIVE.intervalS}`,
        `-c tcp_keepalives_count=${DEDICATED_KEEPALIVE.count}`,
        // Keepalive probes are not sent while the server has unacknowledged data out (a cut that
        // came while it was answering a query): retransmissions then run for many minutes and the
        // session, with its locks, outlives the peer. The same bound covers that case (PG >= 12).
        `-c tcp_user_timeout=${(DEDICATED_KEEPALIVE.idleS + DEDICATED_KEEPALIVE.intervalS * DEDICATED_KEEPALIVE.count) * 1_000}`,
      ].join(" "),
    });
    client.on("error", onError);
    await client.connect();
    return client;
  }

  get isOpen(): boolean {
    return this.#open;
  }

  async close(): Promise<void> {
    if (!this.#open) return;
    this.#open = false;
    await this.#pool.end();
  }

  async get(sql: string, params: unknown[] = [], on: PgQueryable = this.#pool): Promise<PgRow | undefined> {
    return (await on.query(sql, params)).rows[0];
  }

  async all(sql: string, params: unknown[] = [], on: PgQueryable = this.#pool): Promise<PgRow[]> {
    return (await on.query(sql, params)).rows;
  }

  /** The number of rows changed. */
  async run(sql: string, params: unknown[] = [], on: PgQueryable = this.#pool): Promise<number> {
    return (await on.query(sql, params)).rowCount ?? 0;
  }

  /**
   * `fn` in one transaction on one connection (READ COMMITTED; callers lock the rows they
   * read-modify-write with `FOR UPDATE` or single-statement updates). Rolled back when it throws.
   */
  async transaction<T>(fn: (tx: PgQueryable) => Promise<T>): Promise<T> {
    const client = await this.#pool.connect();
    try {
      await client.query("BEGIN");
      const result = await fn(client);
      await client.query("COMMIT");
      return result;
    } catch (error) {
      await client.query("ROLLBACK").catch(() => {});
      throw error;
    } finally {
      client.release();
    }
  }

  /** `fn`, with a uniqueness violation turned into a StoreConflictError (another writer won). */
  async conflictAware<T>(fn: () => Promise<T>): Promise<T> {
    try {
      return await fn();
    } catch (error) {
      if (isUniqueViolation(error))
        throw new StoreConflictError((error as { detail?: string }).detail ?? "uniqueness conflict");
      throw error;
    }
  }

  /**
   * Apply the migrations this schema lacks, in order, each recorded in `schema_migrations`. All in
   * one transaction under a transaction-scoped advisory lock keyed by the schema: two processes
   * opening one database at once apply each migration once (the second waits, then finds it done).
   */
  async #migrate(): Promise<void> {
    await this.transaction(async (tx) => {
      await tx.query("SELECT pg_advisory_xact_lock(hashtext($1))", [`agent-sessions:migrate:${this.schema}`]);
      await tx.query(`CREATE SCHEMA IF NOT EXISTS ${this.schema}`);
      await tx.query(
        `CREATE TABLE IF NOT EXISTS schema_migrations (
           version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`,
      );
      const applied = new Set(
        (await tx.query("SELECT version FROM schema_migrations")).rows.map((row) => Number(row.version)),
      );
      for (const migration of POSTGRES_MIGRATIONS) {
        if (applied.has(migration.version)) continue;
        await tx.query(migration.sql);
        await tx.query("INSERT INTO schema_migrations (version, name) VALUES ($1, $2)", [
          migration.version,
          migration.name,
        ]);
      }
    });
  }
}

export function isUniqueViolation(error: unknown): boolean {
  // SQLSTATE 23505 unique_violation (primary keys too).
  return (error as { code?: string }).code === "23505";
}

/** Positional parameters for SQL built piece by piece: `p(value)` appends and returns `$n`. */
export class PgParams {
  readonly values: unknown[] = [];
  p(value: unknown): string {
    this.values.push(value);
    return `$${this.values.length}`;
  }
}

/**
 * ` ORDER BY <columns> [LIMIT n]` for a page in that order, adding the keyset condition
 * `(columns) > (after)` to `where` (the caller builds the WHERE after this call). The columns are
 * `COLLATE "C"` (postgres-migrations.ts), so the order is SQLite's: by bytes.
 */
export function pgPageSql(
  columns: readonly string[],
  page: PageQuery | undefined,
  where: string[],
  params: PgParams,
): string {
  if (page?.after !== undefined) {
    if (page.after.length !== columns.length) throw new Error(`a page key of ${columns.join(", ")} expected`);
    where.push(`(${columns.join(", ")}) > (${page.after.map((v) => params.p(v)).join(", ")})`);
  }
  return ` ORDER BY ${columns.join(", ")}${page ? ` LIMIT ${Math.trunc(page.limit) + 1}` : ""}`;
}
