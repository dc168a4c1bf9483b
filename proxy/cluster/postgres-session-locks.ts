import { createHash } from "node:crypto";
import type pg from "pg";
import { KeyedMutex } from "../../contracts/keyed-mutex.ts";
import type { KeyedLock } from "../lifecycle/keyed-mutex.ts";
import type { Logger } from "../observability/log.ts";
import type { PostgresDatabase } from "../store/postgres-database.ts";

/**
 * The two-key advisory lock spaces (`pg_try_advisory_lock(int4, int4)`) of this project: the
 * controllers' lease and the keyed locks. Keys are a hash of a string naming the schema, so
 * two test schemas in one database never exclude each other.
 */
const LEASE_SPACE = 0x41530001;
const LOCK_SPACE = 0x41530002;

/** How long a lock waits between two tries at most (it backs off from 5 ms). */
const LOCK_RETRY_MAX_MS = 100;

/**
 * How long a statement on the lock connection may take. Past it the connection counts as lost:
 * the lease and every lock are let go at once. The server drops a silent peer's session only
 * after DEDICATED_KEEPALIVE (8 s), so a holder cut off from the database gives the lease up
 * before another replica can take it.
 */
export const LOCK_QUERY_DEADLINE_MS = 3_000;

/**
 * A lock name as the int4 second key, hashed here: names may hold any character (keys joined
 * with NUL), which a text parameter could not carry to `hashtext`.
 */
export function lockKeyOf(name: string): number {
  return createHash("sha256").update(name).digest().readInt32BE(0);
}

export type PostgresSessionLocksOptions = {
  db: PostgresDatabase;
  log: Logger;
  /** How often a replica without the lease tries to take it, and the holder checks its connection. */
  leasePollMs: number;
  /** The lock connection's application_name (pg_stat_activity shows who holds what). */
  connectionName?: string;
  /** @default LOCK_QUERY_DEADLINE_MS */
  queryDeadlineMs?: number;
};

/**
 * Session-level advisory locks on one connection of this replica's own (outside the pool): the
 * controllers' lease, and a keyed lock per scope. PostgreSQL releases a session's advisory locks
 * when its connection ends, so a replica that dies (`kill -9`, a lost network) drops its lease
 * and locks at once, and another replica's next try (within `leasePollMs`) takes the lease.
 *
 * Locks are only ever *tried* (`pg_try_advisory_lock`, then a short backoff): a blocking
 * `pg_advisory_lock` would hold the one connection, queueing this replica's unlocks behind it —
 * two replicas could then wait on each other for ever.
 */
export class PostgresSessionLocks {
  readonly #o: PostgresSessionLocksOptions;
  readonly #leaseKey: string;
  #client: pg.Client | undefined;
  #connecting: Promise<pg.Client> | undefined;
  #leading = false;
  readonly #listeners = new Set<(leading: boolean) => void>();
  #timer: NodeJS.Timeout | undefined;
  #ticking: Promise<void> | undefined;
  #closed = false;

  constructor(options: PostgresSessionLocksOptions) {
    this.#o = options;
    this.#leaseKey = `agent-sessions:${options.db.schema}:controllers`;
  }

  async start(): Promise<void> {
    await this.#tick();
    this.#timer = setInterval(() => {
      this.#ticking ??= this.#tick().finally(() => {
        this.#ticking = undefined;
      });
    }, this.#o.leasePollMs);
  }

  leads(): boolean {
    return this.#leading;
  }

  onLeadership(listener: (leading: boolean) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /** A KeyedLock whose keys exclude the same keys of every replica (in-process first, then the database). */
  lock(scope: string): KeyedLock {
    const local = new KeyedMutex();
    return {
      run: <T>(key: string, fn: () => Promise<T>) =>
        local.run(key, async () => {
          const name = `agent-sessions:${this.#o.db.schema}:${scope}:${key}`;
          await this.#acquire(name);
          try {
            return await fn();
          } finally {
            await this.#release(name);
          }
        }),
    };
  }

  async close(): Promise<void> {
    this.#closed = true;
    clearInterval(this.#timer);
    await this.#ticking;
    this.#setLeading(false);
    const client = this.#client;
    this.#client = undefined;
    await client?.end().catch(() => {});
  }

  async #tick(): Promise<void> {
    if (this.#closed) return;
    try {
      if (this.#leading) {
        await this.#query("SELECT 1"); // the lease lives as long as this connection does
        return;
      }
      const rows = await this.#query("SELECT pg_try_advisory_lock($1, $2) AS got", [
        LEASE_SPACE,
        lockKeyOf(this.#leaseKey),
      ]);
      if (rows[0]?.got === true) this.#setLeading(true);
    } catch (error) {
      this.#o.log("warn", "the lock connection failed; the lease is let go", { error: String(error) });
      this.#drop();
    }
  }

  async #acquire(name: string): Promise<void> {
    let waitMs = 5;
    for (;;) {
      if (this.#closed) throw new Error("the server is shutting down");
      const rows = await this.#query("SELECT pg_try_advisory_lock($1, $2) AS got", [
        LOCK_SPACE,
        lockKeyOf(name),
      ]);
      if (rows[0]?.got === true) return;
      await new Promise((resolve) => setTimeout(resolve, waitMs));
      waitMs = Math.min(waitMs * 2, LOCK_RETRY_MAX_MS);
    }
  }

  async #release(name: string): Promise<void> {
    const client = this.#client;
    if (!client) return; // its connection ended: the lock went with it
    await this.#query("SELECT pg_advisory_unlock($1, $2)", [LOCK_SPACE, lockKeyOf(name)], client).catch(
      (error: unknown) =>
        this.#o.log("warn", "an advisory unlock failed (the lock ends with its connection)", {
          error: String(error),
        }),
    );
  }

  /**
   * One statement on the lock connection, within the deadline. A connection that does not answer
   * in time is dropped (and the lease with it): a statement that hangs would keep this replica
   * believing it holds what the server may already have given another.
   */
  async #query(sql: string, params: unknown[] = [], on?: pg.Client): Promise<Record<string, unknown>[]> {
    const client = on ?? (await this.#connection());
    let timer: NodeJS.Timeout | undefined;
    const deadlineMs = this.#o.queryDeadlineMs ?? LOCK_QUERY_DEADLINE_MS;
    const late = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () => reject(new Error(`the lock connection did not answer within ${deadlineMs} ms`)),
        deadlineMs,
      );
    });
    try {
      return (await Promise.race([client.query(sql, params), late])).rows;
    } catch (error) {
      if (this.#client === client) this.#drop();
      throw error;
    } finally {
      clearTimeout(timer);
    }
  }

  #connection(): Promise<pg.Client> {
    if (this.#client) return Promise.resolve(this.#client);
    this.#connecting ??= this.#o.db
      .dedicatedClient((error) => {
        this.#o.log("warn", "the lock connection failed", { error: error.message });
        this.#drop();
      }, this.#o.connectionName)
      .then((client) => {
        this.#client = client;
        return client;
      })
      .finally(() => {
        this.#connecting = undefined;
      });
    return this.#connecting;
  }

  /** The connection is gone, and with it the lease and every lock this replica held. */
  #drop(): void {
    const client = this.#client;
    this.#client = undefined;
    this.#setLeading(false);
    void client?.end().catch(() => {});
  }

  #setLeading(leading: boolean): void {
    if (this.#leading === leading) return;
    this.#leading = leading;
    this.#o.log(
      "info",
      leading ? "this replica took the controllers' lease" : "this replica let the controllers' lease go",
    );
    for (const listener of this.#listeners) listener(leading);
  }
}
