import { closeSync, openSync } from "node:fs";
import { DatabaseSync, type SQLInputValue, type SQLOutputValue, type StatementSync } from "node:sqlite";
import { type PageQuery, StoreConflictError } from "./store.ts";

export type Row = Record<string, SQLOutputValue>;

type Batched = { fn: () => unknown; resolve: (value: unknown) => void; reject: (error: unknown) => void };

/**
 * One connection to the server's SQLite file, shared by every store in the process (agent
 * sessions, HarnessSessions, metrics read through them): WAL mode (readers never block the
 * writer), prepared statements cached, transactions synchronous inside so nothing interleaves.
 */
export class SqliteDatabase {
  readonly #db: DatabaseSync;
  /** Prepared statements by SQL text: preparing costs more than running a point query. */
  readonly #statements = new Map<string, StatementSync>();
  /** Writes waiting for this turn's group commit (`batched`). */
  #batch: Batched[] = [];

  constructor(path: string) {
    // The file holds adapter tokens and literal credentials: owner only. SQLite gives its
    // -wal and -shm files the database file's permissions.
    if (path !== ":memory:") closeSync(openSync(path, "a", 0o600));
    this.#db = new DatabaseSync(path);
    this.#db.exec("PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; PRAGMA busy_timeout = 5000;");
  }

  get isOpen(): boolean {
    return this.#db.isOpen;
  }

  close(): void {
    // Writes already asked for are made before the connection goes.
    if (this.#batch.length > 0 && this.#db.isOpen) this.#flush();
    this.#statements.clear();
    if (this.#db.isOpen) this.#db.close();
  }

  exec(sql: string): void {
    this.#db.exec(sql);
  }

  get(sql: string, params: SQLInputValue[] = []): Row | undefined {
    return this.#prepare(sql).get(...params) as Row | undefined;
  }

  all(sql: string, params: SQLInputValue[] = []): Row[] {
    return this.#prepare(sql).all(...params) as Row[];
  }

  /** The number of rows changed. */
  run(sql: string, params: SQLInputValue[] = []): number {
    return Number(this.#prepare(sql).run(...params).changes);
  }

  /**
   * Synchronous, so nothing else interleaves; BEGIN IMMEDIATE so another process waits for us.
   * Writes `batched` earlier in this turn are committed first: the connection's transactions
   * commit in the order they were asked for (a frame appended before a status change keeps the
   * earlier seq).
   */
  transaction<T>(fn: () => T): T {
    if (this.#batch.length > 0) this.#flush();
    this.#db.exec("BEGIN IMMEDIATE");
    try {
      const result = fn();
      this.#db.exec("COMMIT");
      return result;
    } catch (error) {
      this.#db.exec("ROLLBACK");
      throw error;
    }
  }

  /**
   * `fn` in one transaction with the other batched writes of this turn of the event loop (group
   * commit): one BEGIN/COMMIT, its locks and WAL writes (pages shared: the same session's row),
   * for all of them, not one each. A relayed request makes two writes (admission, settlement);
   * unbatched, they were ~37 syscalls a request (pwrite and fcntl), more than the whole relay
   * hop; so is a frame's append (its RequestFinished event). Each `fn` runs in its own savepoint: one that throws is rolled back alone and rejects
   * alone. Resolves once committed; the wait is one `setImmediate` (nothing else runs between).
   */
  batched<T>(fn: () => T): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      this.#batch.push({ fn, resolve: resolve as (value: unknown) => void, reject });
      if (this.#batch.length === 1) setImmediate(() => this.#flush());
    });
  }

  #flush(): void {
    const batch = this.#batch;
    this.#batch = [];
    if (batch.length === 0) return;
    const outcomes: ({ ok: true; value: unknown } | { ok: false; error: unknown })[] = [];
    try {
      this.transaction(() => {
        for (const item of batch) {
          this.#db.exec("SAVEPOINT batched");
          try {
            const value = item.fn();
            this.#db.exec("RELEASE batched");
            outcomes.push({ ok: true, value });
          } catch (error) {
            this.#db.exec("ROLLBACK TO batched");
            this.#db.exec("RELEASE batched");
            outcomes.push({ ok: false, error });
          }
        }
      });
    } catch (error) {
      for (const item of batch) item.reject(error);
      return;
    }
    batch.forEach((item, i) => {
      const outcome = outcomes[i];
      if (outcome?.ok) item.resolve(outcome.value);
      else item.reject(outcome?.error);
    });
  }

  /** `fn`, with a uniqueness violation turned into a StoreConflictError (another writer won). */
  conflictAware<T>(fn: () => T): T {
    try {
      return fn();
    } catch (error) {
      if (isUniqueViolation(error))
        throw new StoreConflictError((error as { message?: string }).message ?? "uniqueness conflict");
      throw error;
    }
  }

  #prepare(sql: string): StatementSync {
    let statement = this.#statements.get(sql);
    if (!statement) {
      statement = this.#db.prepare(sql);
      this.#statements.set(sql, statement);
    }
    return statement;
  }
}

export function isUniqueViolation(error: unknown): boolean {
  const e = error as { code?: string; errcode?: number };
  // SQLITE_CONSTRAINT_UNIQUE (2067) and SQLITE_CONSTRAINT_PRIMARYKEY (1555).
  return e.code === "ERR_SQLITE_ERROR" && (e.errcode === 2067 || e.errcode === 1555);
}

export function optionalString(value: SQLOutputValue | undefined): string | undefined {
  return value === null || value === undefined ? undefined : String(value);
}

/**
 * ` ORDER BY <columns> [LIMIT n]` for a page in that order, adding the keyset condition
 * `(columns) > (after)` to `where`/`params` (the caller builds the WHERE after this call).
 */
export function pageSql(
  columns: readonly string[],
  page: PageQuery | undefined,
  where: string[],
  params: SQLInputValue[],
): string {
  if (page?.after !== undefined) {
    if (page.after.length !== columns.length) throw new Error(`a page key of ${columns.join(", ")} expected`);
    where.push(`(${columns.join(", ")}) > (${columns.map(() => "?").join(", ")})`);
    params.push(...page.after);
  }
  return ` ORDER BY ${columns.join(", ")}${page ? ` LIMIT ${Math.trunc(page.limit) + 1}` : ""}`;
}

/**
 * A store's connection: its own when given a path (the store closes it), else the process's
 * shared one (its owner closes it).
 */
export function storeConnection(database: string | SqliteDatabase): { db: SqliteDatabase; owned: boolean } {
  return typeof database === "string"
    ? { db: new SqliteDatabase(database), owned: true }
    : { db: database, owned: false };
}
