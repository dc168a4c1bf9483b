import type { Usage } from "../../contracts/adapter.ts";
import type { Condition, HarnessPhase, HarnessSessionSpec } from "../../contracts/harness-session.ts";
import type {
  BeginResult,
  HarnessRecord,
  HarnessRequestRecord,
  HarnessServing,
  HarnessStore,
  ExpiryCandidate,
  IdleCandidate,
  NewHarnessRequest,
  NewHarnessSession,
  ObservedPatch,
  RequestFinish,
} from "./harness-store.ts";
import { type PageQuery, StoreConflictError } from "./store.ts";
import type { SQLInputValue } from "node:sqlite";
import {
  isUniqueViolation,
  optionalString,
  pageSql,
  type Row,
  type SqliteDatabase,
  storeConnection,
} from "./sqlite-database.ts";
import { toHarnessRecord, toHarnessRequest, toHarnessServing } from "./harness-rows.ts";

const SCHEMA = `
CREATE TABLE IF NOT EXISTS harness_sessions (
  namespace TEXT NOT NULL, name TEXT NOT NULL, uid TEXT NOT NULL,
  spec TEXT NOT NULL, generation INTEGER NOT NULL,
  created_at TEXT NOT NULL, updated_at TEXT NOT NULL, deletion_requested_at TEXT,
  observed_generation INTEGER NOT NULL DEFAULT 0,
  phase TEXT NOT NULL DEFAULT 'Pending', conditions TEXT NOT NULL DEFAULT '[]',
  container_name TEXT, session_id TEXT, resolved_image_digest TEXT,
  last_activity_time TEXT,
  request_count INTEGER NOT NULL DEFAULT 0, active_requests INTEGER NOT NULL DEFAULT 0,
  error_count INTEGER NOT NULL DEFAULT 0,
  last_request_id TEXT, last_request_outcome TEXT, last_request_usage TEXT,
  input_tokens INTEGER NOT NULL DEFAULT 0, output_tokens INTEGER NOT NULL DEFAULT 0,
  usage_reported INTEGER NOT NULL DEFAULT 0, usage_unavailable INTEGER NOT NULL DEFAULT 0,
  restart_count INTEGER NOT NULL DEFAULT 0, consecutive_restarts INTEGER NOT NULL DEFAULT 0,
  restart_at TEXT, last_exit TEXT,
  gateway_input_tokens INTEGER NOT NULL DEFAULT 0, gateway_output_tokens INTEGER NOT NULL DEFAULT 0,
  gateway_reported INTEGER NOT NULL DEFAULT 0, gateway_unavailable INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY (namespace, name)
);
CREATE INDEX IF NOT EXISTS harness_sessions_by_session ON harness_sessions (session_id);
CREATE INDEX IF NOT EXISTS harness_sessions_idle ON harness_sessions
  (phase, json_extract(spec, '$.idleTimeout'), last_activity_time);
CREATE INDEX IF NOT EXISTS harness_sessions_unsettled ON harness_sessions (namespace, name)
  WHERE deletion_requested_at IS NULL AND (phase IN ('Pending', 'Draining') OR observed_generation < generation);
CREATE TABLE IF NOT EXISTS harness_requests (
  namespace TEXT NOT NULL, name TEXT NOT NULL, request_id TEXT NOT NULL,
  relay_id TEXT NOT NULL, runner_id TEXT NOT NULL, container_name TEXT NOT NULL,
  started_at TEXT NOT NULL, finished_at TEXT, outcome TEXT, cancel_requested_at TEXT,
  PRIMARY KEY (namespace, name, request_id)
);
CREATE INDEX IF NOT EXISTS harness_requests_in_flight ON harness_requests (finished_at, started_at);
`;

/** Columns newer than the first release of the table, with their definitions (for #migrate). */
const ADDED_COLUMNS: readonly [string, string][] = [
  ["restart_count", "INTEGER NOT NULL DEFAULT 0"],
  ["consecutive_restarts", "INTEGER NOT NULL DEFAULT 0"],
  ["restart_at", "TEXT"],
  ["last_exit", "TEXT"],
  ["gateway_input_tokens", "INTEGER NOT NULL DEFAULT 0"],
  ["gateway_output_tokens", "INTEGER NOT NULL DEFAULT 0"],
  ["gateway_reported", "INTEGER NOT NULL DEFAULT 0"],
  ["gateway_unavailable", "INTEGER NOT NULL DEFAULT 0"],
];

/**
 * The embedded HarnessStore: its own tables in the server's SQLite file, on its own connection
 * (WAL; node:sqlite is synchronous, so the two connections of one process never interleave a
 * transaction).
 */
export class SqliteHarnessStore implements HarnessStore {
  readonly #db: SqliteDatabase;
  /** Whether this store opened the connection (and closes it), or shares the process's. */
  readonly #ownsDb: boolean;

  /** `database`: a path (a connection of its own) or the process's shared connection. */
  constructor(database: string | SqliteDatabase) {
    ({ db: this.#db, owned: this.#ownsDb } = storeConnection(database));
    this.#db.exec(SCHEMA);
    this.#migrate();
  }

  /** Columns added since the table was first made: a database from an older release gains them. */
  #migrate(): void {
    const columns = new Set(
      this.#db.all("SELECT name FROM pragma_table_info('harness_sessions')").map((row) => String(row.name)),
    );
    for (const [column, type] of ADDED_COLUMNS)
      if (!columns.has(column)) this.#db.exec(`ALTER TABLE harness_sessions ADD COLUMN ${column} ${type}`);
    // Gateway reports find their session by workspace (addGatewayUsage).
    this.#db.exec(
      "CREATE INDEX IF NOT EXISTS harness_sessions_by_container ON harness_sessions (container_name)",
    );
  }

  async close(): Promise<void> {
    if (this.#ownsDb) this.#db.close();
  }

  async createHarnessSession(s: NewHarnessSession): Promise<HarnessRecord> {
    const now = new Date().toISOString();
    try {
      const row = this.#db.get(
        `INSERT INTO harness_sessions (namespace, name, uid, spec, generation, created_at, updated_at, conditions)
         VALUES (?, ?, ?, ?, 1, ?, ?, ?) RETURNING *`,
        [s.namespace, s.name, s.uid, JSON.stringify(s.spec), now, now, JSON.stringify(s.conditions)],
      );
      if (!row) throw new Error("harness session insert returned no row");
      return toHarnessRecord(row);
    } catch (error) {
      if (isUniqueViolation(error))
        throw new StoreConflictError(`HarnessSession ${s.namespace}/${s.name} exists`);
      throw error;
    }
  }

  async replaceHarnessSpec(
    namespace: string,
    name: string,
    spec: HarnessSessionSpec,
    expectedGeneration: number,
  ): Promise<HarnessRecord | undefined> {
    const row = this.#db.get(
      `UPDATE harness_sessions SET spec = ?, generation = generation + 1, updated_at = ?
       WHERE namespace = ? AND name = ? AND generation = ? AND deletion_requested_at IS NULL RETURNING *`,
      [JSON.stringify(spec), new Date().toISOString(), namespace, name, expectedGeneration],
    );
    return row ? toHarnessRecord(row) : undefined;
  }

  async getHarnessSession(namespace: string, name: string): Promise<HarnessRecord | undefined> {
    const row = this.#db.get("SELECT * FROM harness_sessions WHERE namespace = ? AND name = ?", [
      namespace,
      name,
    ]);
    return row ? toHarnessRecord(row) : undefined;
  }

  async getServing(namespace: string, name: string): Promise<HarnessServing | undefined> {
    const row = this.#db.get(
      "SELECT phase, container_name, session_id FROM harness_sessions WHERE namespace = ? AND name = ?",
      [namespace, name],
    );
    return row ? toHarnessServing(namespace, name, row) : undefined;
  }

  async listHarnessSessions(namespace?: string, page?: PageQuery): Promise<HarnessRecord[]> {
    const where: string[] = [];
    const params: SQLInputValue[] = [];
    if (namespace !== undefined) {
      where.push("namespace = ?");
      params.push(namespace);
    }
    const order = pageSql(namespace === undefined ? ["namespace", "name"] : ["name"], page, where, params);
    const sql = `SELECT * FROM harness_sessions ${where.length ? `WHERE ${where.join(" AND ")}` : ""}${order}`;
    return this.#db.all(sql, params).map(toHarnessRecord);
  }

  async listIdleCandidates(cutoffFor: (idleTimeout: string) => string | undefined): Promise<IdleCandidate[]> {
    // Few distinct timeouts; each one's idle sessions are a range of the idle index.
    const rows: Row[] = [];
    for (const [field, phases] of [
      ["idleTimeout", "('Ready', 'Paused')"],
      ["pauseAfter", "('Ready')"],
    ] as const) {
      const timeouts = this.#db
        .all(
          `SELECT DISTINCT json_extract(spec, '$.${field}') AS timeout FROM harness_sessions
         WHERE phase IN ${phases} AND json_extract(spec, '$.${field}') IS NOT NULL`,
        )
        .map((row) => String(row.timeout));
      for (const timeout of timeouts) {
        const cutoff = cutoffFor(timeout);
        if (cutoff === undefined) continue;
        rows.push(
          ...this.#db.all(
            `SELECT namespace, name, spec, phase, last_activity_time FROM harness_sessions
           WHERE phase IN ${phases} AND json_extract(spec, '$.${field}') = ?
             AND (last_activity_time IS NULL OR last_activity_time <= ?)
             AND deletion_requested_at IS NULL AND active_requests = 0
             AND json_extract(spec, '$.desiredState') IN ('running', 'paused')`,
            [timeout, cutoff],
          ),
        );
      }
    }
    // desiredState paused: frozen again as soon as nothing is in flight.
    rows.push(
      ...this.#db.all(
        `SELECT namespace, name, spec, phase, last_activity_time FROM harness_sessions
         WHERE phase = 'Ready' AND json_extract(spec, '$.desiredState') = 'paused'
           AND deletion_requested_at IS NULL AND active_requests = 0`,
      ),
    );
    return rows.map((row) => ({
      namespace: String(row.namespace),
      name: String(row.name),
      phase: String(row.phase) as HarnessPhase,
      spec: JSON.parse(String(row.spec)) as HarnessSessionSpec,
      active_requests: 0,
      last_activity_time: optionalString(row.last_activity_time),
      deletion_requested_at: undefined,
    }));
  }

  async listExpiryCandidates(): Promise<ExpiryCandidate[]> {
    const rows = this.#db.all(
      `SELECT namespace, name, spec, created_at FROM harness_sessions
       WHERE deletion_requested_at IS NULL AND (json_extract(spec, '$.ttl') IS NOT NULL OR json_extract(spec, '$.expiresAt') IS NOT NULL)`,
    );
    return rows.map((row) => ({
      namespace: String(row.namespace),
      name: String(row.name),
      spec: JSON.parse(String(row.spec)) as HarnessSessionSpec,
      created_at: String(row.created_at),
    }));
  }

  async listUnsettledHarnessSessions(): Promise<HarnessRecord[]> {
    return this.#db
      .all(
        `SELECT * FROM harness_sessions WHERE deletion_requested_at IS NULL
         AND (phase IN ('Pending', 'Draining') OR observed_generation < generation)
       ORDER BY namespace, name`,
      )
      .map(toHarnessRecord);
  }

  async countHarnessSessionsByPhase(): Promise<Map<HarnessPhase, number>> {
    const rows = this.#db.all("SELECT phase, COUNT(*) AS n FROM harness_sessions GROUP BY phase");
    return new Map(rows.map((row) => [String(row.phase) as HarnessPhase, Number(row.n)]));
  }

  async findHarnessSessionBySessionId(sessionId: string): Promise<HarnessRecord | undefined> {
    const row = this.#db.get("SELECT * FROM harness_sessions WHERE session_id = ?", [sessionId]);
    return row ? toHarnessRecord(row) : undefined;
  }

  async markHarnessDeleting(
    namespace: string,
    name: string,
    now: string,
  ): Promise<HarnessRecord | undefined> {
    const row = this.#db.get(
      `UPDATE harness_sessions SET deletion_requested_at = COALESCE(deletion_requested_at, ?), updated_at = ?
       WHERE namespace = ? AND name = ? RETURNING *`,
      [now, now, namespace, name],
    );
    return row ? toHarnessRecord(row) : undefined;
  }

  async deleteHarnessSession(namespace: string, name: string): Promise<boolean> {
    return this.#db.transaction(() => {
      this.#db.run("DELETE FROM harness_requests WHERE namespace = ? AND name = ?", [namespace, name]);
      return (
        this.#db.run("DELETE FROM harness_sessions WHERE namespace = ? AND name = ?", [namespace, name]) > 0
      );
    });
  }

  async setObserved(
    namespace: string,
    name: string,
    patch: ObservedPatch,
  ): Promise<HarnessRecord | undefined> {
    const sets: string[] = [];
    const params: SQLInputValue[] = [];
    for (const [column, value] of Object.entries(patch) as [keyof ObservedPatch, unknown][]) {
      if (value === undefined) continue;
      sets.push(`${column} = ?`);
      params.push(
        column === "conditions" || column === "last_exit" ? JSON.stringify(value) : (value as SQLInputValue),
      );
    }
    sets.push("updated_at = ?");
    params.push(new Date().toISOString());
    const row = this.#db.get(
      `UPDATE harness_sessions SET ${sets.join(", ")} WHERE namespace = ? AND name = ? RETURNING *`,
      [...params, namespace, name],
    );
    return row ? toHarnessRecord(row) : undefined;
  }

  async beginDraining(
    namespace: string,
    name: string,
    change: { conditions: Condition[]; idle?: { cutoff: string }; to?: "Draining" | "Paused" },
  ): Promise<boolean> {
    const idle = change.idle
      ? " AND active_requests = 0 AND (last_activity_time IS NULL OR last_activity_time <= ?)"
      : "";
    const to = change.to ?? "Draining";
    const from = to === "Paused" ? "('Ready')" : "('Ready', 'Paused')";
    const changed = this.#db.run(
      `UPDATE harness_sessions SET phase = '${to}', conditions = ?, updated_at = ?
       WHERE namespace = ? AND name = ? AND phase IN ${from}${idle}`,
      [
        JSON.stringify(change.conditions),
        new Date().toISOString(),
        namespace,
        name,
        ...(change.idle ? [change.idle.cutoff] : []),
      ],
    );
    return changed > 0;
  }

  async beginRequest(r: NewHarnessRequest): Promise<BeginResult> {
    try {
      // Group commit with the other admissions and settlements of this turn (sqlite-database.ts).
      return await this.#db.batched(() => this.#begin(r));
    } catch (error) {
      if (error instanceof DuplicateRequest) return { ok: false, reason: "duplicate" };
      throw error;
    }
  }

  /** In a savepoint of the batch's transaction: a duplicate rolls its counting back. */
  #begin(r: NewHarnessRequest): BeginResult {
    const admitted = this.#db.get(
      `UPDATE harness_sessions SET request_count = request_count + 1, active_requests = active_requests + 1,
         last_activity_time = ?
       WHERE namespace = ? AND name = ? AND phase = 'Ready' AND deletion_requested_at IS NULL RETURNING 1 AS admitted`,
      [r.now, r.namespace, r.name],
    );
    if (!admitted) {
      const existing = this.#db.get("SELECT * FROM harness_sessions WHERE namespace = ? AND name = ?", [
        r.namespace,
        r.name,
      ]);
      return existing
        ? { ok: false, reason: "not-ready", session: toHarnessRecord(existing) }
        : { ok: false, reason: "not-found" };
    }
    const inserted = this.#db.get(
      `INSERT INTO harness_requests (namespace, name, request_id, relay_id, runner_id, container_name, started_at)
       VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING RETURNING request_id`,
      [r.namespace, r.name, r.request_id, r.relay_id, r.runner_id, r.container_name, r.now],
    );
    if (!inserted) throw new DuplicateRequest();
    return { ok: true };
  }

  async finishRequest(f: RequestFinish): Promise<boolean> {
    return this.#db.batched(() => {
      const settled = this.#db.run(
        `UPDATE harness_requests SET finished_at = ?, outcome = ?
         WHERE namespace = ? AND name = ? AND request_id = ? AND finished_at IS NULL`,
        [f.now, f.outcome, f.namespace, f.name, f.request_id],
      );
      if (settled === 0) return false;
      const reported = f.usage === "unavailable" ? undefined : f.usage;
      this.#db.run(
        `UPDATE harness_sessions SET active_requests = MAX(active_requests - 1, 0),
           error_count = error_count + ?, last_request_id = ?, last_request_outcome = ?, last_request_usage = ?,
           last_activity_time = ?, input_tokens = input_tokens + ?, output_tokens = output_tokens + ?,
           usage_reported = usage_reported + ?, usage_unavailable = usage_unavailable + ?
         WHERE namespace = ? AND name = ?`,
        [
          f.outcome === "failed" ? 1 : 0,
          f.request_id,
          f.outcome,
          JSON.stringify(f.usage),
          f.now,
          reported?.input_tokens ?? 0,
          reported?.output_tokens ?? 0,
          reported ? 1 : 0,
          reported ? 0 : 1,
          f.namespace,
          f.name,
        ],
      );
      return true;
    });
  }

  async addGatewayUsage(
    containerName: string,
    usage: Usage,
  ): Promise<{ namespace: string; name: string } | undefined> {
    const reported = usage === "unavailable" ? undefined : usage;
    // Group commit with this turn's admissions and settlements: a report comes with every model call.
    const row = await this.#db.batched(() =>
      this.#db.get(
        `UPDATE harness_sessions SET gateway_input_tokens = gateway_input_tokens + ?,
         gateway_output_tokens = gateway_output_tokens + ?,
         gateway_reported = gateway_reported + ?, gateway_unavailable = gateway_unavailable + ?
       WHERE container_name = ? RETURNING namespace, name`,
        [
          reported?.input_tokens ?? 0,
          reported?.output_tokens ?? 0,
          reported ? 1 : 0,
          reported ? 0 : 1,
          containerName,
        ],
      ),
    );
    return row ? { namespace: String(row.namespace), name: String(row.name) } : undefined;
  }

  async getRequest(
    namespace: string,
    name: string,
    requestId: string,
  ): Promise<HarnessRequestRecord | undefined> {
    const row = this.#db.get(
      "SELECT * FROM harness_requests WHERE namespace = ? AND name = ? AND request_id = ?",
      [namespace, name, requestId],
    );
    return row ? toHarnessRequest(row) : undefined;
  }

  async markCancelRequested(
    namespace: string,
    name: string,
    requestId: string,
    now: string,
  ): Promise<HarnessRequestRecord | undefined> {
    const row = this.#db.get(
      `UPDATE harness_requests SET cancel_requested_at = COALESCE(cancel_requested_at, ?)
       WHERE namespace = ? AND name = ? AND request_id = ? AND finished_at IS NULL RETURNING *`,
      [now, namespace, name, requestId],
    );
    return row ? toHarnessRequest(row) : undefined;
  }

  async reapStaleRequests(cutoff: string, now: string): Promise<number> {
    return this.#db.transaction(() => {
      const stale = this.#db.all(
        `UPDATE harness_requests SET finished_at = ?, outcome = 'failed'
         WHERE finished_at IS NULL AND started_at < ? RETURNING namespace, name`,
        [now, cutoff],
      );
      for (const row of stale)
        this.#db.run(
          `UPDATE harness_sessions SET active_requests = MAX(active_requests - 1, 0), error_count = error_count + 1,
             usage_unavailable = usage_unavailable + 1
           WHERE namespace = ? AND name = ?`,
          [String(row.namespace), String(row.name)],
        );
      return stale.length;
    });
  }
}

class DuplicateRequest extends Error {
  override name = "DuplicateRequest";
}
