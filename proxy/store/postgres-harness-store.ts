import type { Usage } from "../../contracts/adapter.ts";
import type { Condition, HarnessPhase, HarnessSessionSpec } from "../../contracts/harness-session.ts";
import { toHarnessRecord, toHarnessRequest, toHarnessServing } from "./harness-rows.ts";
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
import { isUniqueViolation, PgParams, type PostgresDatabase, pgPageSql } from "./postgres-database.ts";
import { optionalString } from "./store-rows.ts";
import { type PageQuery, StoreConflictError } from "./store.ts";

/** The columns `setObserved` may write (its patch's keys), JSON ones serialized. */
const OBSERVED_COLUMNS = new Set<keyof ObservedPatch>([
  "observed_generation",
  "phase",
  "conditions",
  "container_name",
  "session_id",
  "resolved_image_digest",
  "last_activity_time",
  "restart_count",
  "consecutive_restarts",
  "restart_at",
  "last_exit",
]);

/** The spec's idle timeout as the idle index has it (postgres-migrations.ts). */
const IDLE_TIMEOUT = `((spec::jsonb ->> 'idleTimeout') COLLATE "C")`;
const PAUSE_AFTER = `((spec::jsonb ->> 'pauseAfter') COLLATE "C")`;

/**
 * The HarnessStore on PostgreSQL. Counters change only by single `SET x = x + n` statements and
 * phase changes are compare-and-set `UPDATE … WHERE phase = …`, so replicas never lose an update.
 */
export class PostgresHarnessStore implements HarnessStore {
  readonly #db: PostgresDatabase;

  /** `database` is the process's pool (migrated by `PostgresDatabase.open`); its owner closes it. */
  constructor(database: PostgresDatabase) {
    this.#db = database;
  }

  async close(): Promise<void> {}

  async createHarnessSession(s: NewHarnessSession): Promise<HarnessRecord> {
    const now = new Date().toISOString();
    try {
      const row = await this.#db.get(
        `INSERT INTO harness_sessions (namespace, name, uid, spec, generation, created_at, updated_at, conditions)
         VALUES ($1, $2, $3, $4, 1, $5, $5, $6) RETURNING *`,
        [s.namespace, s.name, s.uid, JSON.stringify(s.spec), now, JSON.stringify(s.conditions)],
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
    const row = await this.#db.get(
      `UPDATE harness_sessions SET spec = $1, generation = generation + 1, updated_at = $2
       WHERE namespace = $3 AND name = $4 AND generation = $5 AND deletion_requested_at IS NULL RETURNING *`,
      [JSON.stringify(spec), new Date().toISOString(), namespace, name, expectedGeneration],
    );
    return row ? toHarnessRecord(row) : undefined;
  }

  async getHarnessSession(namespace: string, name: string): Promise<HarnessRecord | undefined> {
    const row = await this.#db.get("SELECT * FROM harness_sessions WHERE namespace = $1 AND name = $2", [
      namespace,
      name,
    ]);
    return row ? toHarnessRecord(row) : undefined;
  }

  async getServing(namespace: string, name: string): Promise<HarnessServing | undefined> {
    const row = await this.#db.get(
      "SELECT phase, container_name, session_id FROM harness_sessions WHERE namespace = $1 AND name = $2",
      [namespace, name],
    );
    return row ? toHarnessServing(namespace, name, row) : undefined;
  }

  async listHarnessSessions(namespace?: string, page?: PageQuery): Promise<HarnessRecord[]> {
    const params = new PgParams();
    const where: string[] = [];
    if (namespace !== undefined) where.push(`namespace = ${params.p(namespace)}`);
    const order = pgPageSql(namespace === undefined ? ["namespace", "name"] : ["name"], page, where, params);
    const rows = await this.#db.all(
      `SELECT * FROM harness_sessions ${where.length ? `WHERE ${where.join(" AND ")}` : ""}${order}`,
      params.values,
    );
    return rows.map(toHarnessRecord);
  }

  async listIdleCandidates(cutoffFor: (idleTimeout: string) => string | undefined): Promise<IdleCandidate[]> {
    // Few distinct timeouts; each one's idle sessions are a range of the idle index.
    const candidates: IdleCandidate[] = [];
    const take = (rows: Record<string, unknown>[]) => {
      for (const row of rows)
        candidates.push({
          namespace: String(row.namespace),
          name: String(row.name),
          phase: String(row.phase) as HarnessPhase,
          spec: JSON.parse(String(row.spec)) as HarnessSessionSpec,
          active_requests: 0,
          last_activity_time: optionalString(row.last_activity_time),
          deletion_requested_at: undefined,
        });
    };
    for (const [field, phases] of [
      [IDLE_TIMEOUT, "('Ready', 'Paused')"],
      [PAUSE_AFTER, "('Ready')"],
    ] as const) {
      const timeouts = (
        await this.#db.all(
          `SELECT DISTINCT ${field} AS timeout FROM harness_sessions WHERE phase IN ${phases} AND ${field} IS NOT NULL`,
        )
      ).map((row) => String(row.timeout));
      for (const timeout of timeouts) {
        const cutoff = cutoffFor(timeout);
        if (cutoff === undefined) continue;
        take(
          await this.#db.all(
            `SELECT namespace, name, spec, phase, last_activity_time FROM harness_sessions
             WHERE phase IN ${phases} AND ${field} = $1
               AND (last_activity_time IS NULL OR last_activity_time <= $2)
               AND deletion_requested_at IS NULL AND active_requests = 0
               AND spec::jsonb ->> 'desiredState' IN ('running', 'paused')`,
            [timeout, cutoff],
          ),
        );
      }
    }
    // desiredState paused: frozen again as soon as nothing is in flight.
    take(
      await this.#db.all(
        `SELECT namespace, name, spec, phase, last_activity_time FROM harness_sessions
         WHERE phase = 'Ready' AND spec::jsonb ->> 'desiredState' = 'paused'
           AND deletion_requested_at IS NULL AND active_requests = 0`,
      ),
    );
    return candidates;
  }

  async listExpiryCandidates(): Promise<ExpiryCandidate[]> {
    const rows = await this.#db.all(
      `SELECT namespace, name, spec, created_at FROM harness_sessions
       WHERE deletion_requested_at IS NULL AND ((spec::jsonb ->> 'ttl') IS NOT NULL OR (spec::jsonb ->> 'expiresAt') IS NOT NULL)`,
    );
    return rows.map((row) => ({
      namespace: String(row.namespace),
      name: String(row.name),
      spec: JSON.parse(String(row.spec)) as HarnessSessionSpec,
      created_at: String(row.created_at),
    }));
  }

  async listUnsettledHarnessSessions(): Promise<HarnessRecord[]> {
    const rows = await this.#db.all(
      `SELECT * FROM harness_sessions WHERE deletion_requested_at IS NULL
         AND (phase IN ('Pending', 'Draining') OR observed_generation < generation)
       ORDER BY namespace, name`,
    );
    return rows.map(toHarnessRecord);
  }

  async countHarnessSessionsByPhase(): Promise<Map<HarnessPhase, number>> {
    const rows = await this.#db.all("SELECT phase, COUNT(*) AS n FROM harness_sessions GROUP BY phase");
    return new Map(rows.map((row) => [String(row.phase) as HarnessPhase, Number(row.n)]));
  }

  async findHarnessSessionBySessionId(sessionId: string): Promise<HarnessRecord | undefined> {
    const row = await this.#db.get("SELECT * FROM harness_sessions WHERE session_id = $1 LIMIT 1", [
      sessionId,
    ]);
    return row ? toHarnessRecord(row) : undefined;
  }

  async markHarnessDeleting(
    namespace: string,
    name: string,
    now: string,
  ): Promise<HarnessRecord | undefined> {
    const row = await this.#db.get(
      `UPDATE harness_sessions SET deletion_requested_at = COALESCE(deletion_requested_at, $1), updated_at = $1
       WHERE namespace = $2 AND name = $3 RETURNING *`,
      [now, namespace, name],
    );
    return row ? toHarnessRecord(row) : undefined;
  }

  async deleteHarnessSession(namespace: string, name: string): Promise<boolean> {
    return this.#db.transaction(async (tx) => {
      await this.#db.run(
        "DELETE FROM harness_requests WHERE namespace = $1 AND name = $2",
        [namespace, name],
        tx,
      );
      return (
        (await this.#db.run(
          "DELETE FROM harness_sessions WHERE namespace = $1 AND name = $2",
          [namespace, name],
          tx,
        )) > 0
      );
    });
  }

  async setObserved(
    namespace: string,
    name: string,
    patch: ObservedPatch,
  ): Promise<HarnessRecord | undefined> {
    const params = new PgParams();
    const sets: string[] = [];
    for (const [column, value] of Object.entries(patch) as [keyof ObservedPatch, unknown][]) {
      if (value === undefined) continue;
      if (!OBSERVED_COLUMNS.has(column))
        throw new Error(`setObserved: ${String(column)} is not an observed column`);
      sets.push(
        `${column} = ${params.p(column === "conditions" || column === "last_exit" ? JSON.stringify(value) : value)}`,
      );
    }
    sets.push(`updated_at = ${params.p(new Date().toISOString())}`);
    const row = await this.#db.get(
      `UPDATE harness_sessions SET ${sets.join(", ")} WHERE namespace = ${params.p(namespace)} AND name = ${params.p(name)} RETURNING *`,
      params.values,
    );
    return row ? toHarnessRecord(row) : undefined;
  }

  async beginDraining(
    namespace: string,
    name: string,
    change: { conditions: Condition[]; idle?: { cutoff: string }; to?: "Draining" | "Paused" },
  ): Promise<boolean> {
    const to = change.to ?? "Draining";
    const from = to === "Paused" ? "('Ready')" : "('Ready', 'Paused')";
    const params = new PgParams();
    const conditions = params.p(JSON.stringify(change.conditions));
    const now = params.p(new Date().toISOString());
    const idle = change.idle
      ? ` AND active_requests = 0 AND (last_activity_time IS NULL OR last_activity_time <= ${params.p(change.idle.cutoff)})`
      : "";
    const changed = await this.#db.run(
      `UPDATE harness_sessions SET phase = '${to}', conditions = ${conditions}, updated_at = ${now}
       WHERE namespace = ${params.p(namespace)} AND name = ${params.p(name)} AND phase IN ${from}${idle}`,
      params.values,
    );
    return changed > 0;
  }

  async beginRequest(r: NewHarnessRequest): Promise<BeginResult> {
    try {
      return await this.#db.transaction(async (tx): Promise<BeginResult> => {
        const admitted = await this.#db.get(
          `UPDATE harness_sessions SET request_count = request_count + 1, active_requests = active_requests + 1,
             last_activity_time = $1
           WHERE namespace = $2 AND name = $3 AND phase = 'Ready' AND deletion_requested_at IS NULL RETURNING 1 AS admitted`,
          [r.now, r.namespace, r.name],
          tx,
        );
        if (!admitted) {
          const existing = await this.#db.get(
            "SELECT * FROM harness_sessions WHERE namespace = $1 AND name = $2",
            [r.namespace, r.name],
            tx,
          );
          return existing
            ? { ok: false, reason: "not-ready", session: toHarnessRecord(existing) }
            : { ok: false, reason: "not-found" };
        }
        const inserted = await this.#db.get(
          `INSERT INTO harness_requests (namespace, name, request_id, relay_id, runner_id, container_name, started_at)
           VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT DO NOTHING RETURNING request_id`,
          [r.namespace, r.name, r.request_id, r.relay_id, r.runner_id, r.container_name, r.now],
          tx,
        );
        // Throwing rolls the counting back: a duplicate changes nothing.
        if (!inserted) throw new DuplicateRequest();
        return { ok: true };
      });
    } catch (error) {
      if (error instanceof DuplicateRequest) return { ok: false, reason: "duplicate" };
      throw error;
    }
  }

  async finishRequest(f: RequestFinish): Promise<boolean> {
    return this.#db.transaction(async (tx) => {
      const settled = await this.#db.run(
        `UPDATE harness_requests SET finished_at = $1, outcome = $2
         WHERE namespace = $3 AND name = $4 AND request_id = $5 AND finished_at IS NULL`,
        [f.now, f.outcome, f.namespace, f.name, f.request_id],
        tx,
      );
      if (settled === 0) return false;
      const reported = f.usage === "unavailable" ? undefined : f.usage;
      await this.#db.run(
        `UPDATE harness_sessions SET active_requests = GREATEST(active_requests - 1, 0),
           error_count = error_count + $1, last_request_id = $2, last_request_outcome = $3, last_request_usage = $4,
           last_activity_time = $5, input_tokens = input_tokens + $6, output_tokens = output_tokens + $7,
           usage_reported = usage_reported + $8, usage_unavailable = usage_unavailable + $9
         WHERE namespace = $10 AND name = $11`,
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
        tx,
      );
      return true;
    });
  }

  async addGatewayUsage(
    containerName: string,
    usage: Usage,
  ): Promise<{ namespace: string; name: string } | undefined> {
    const reported = usage === "unavailable" ? undefined : usage;
    const row = await this.#db.get(
      `UPDATE harness_sessions SET gateway_input_tokens = gateway_input_tokens + $1,
         gateway_output_tokens = gateway_output_tokens + $2,
         gateway_reported = gateway_reported + $3, gateway_unavailable = gateway_unavailable + $4
       WHERE container_name = $5 RETURNING namespace, name`,
      [
        reported?.input_tokens ?? 0,
        reported?.output_tokens ?? 0,
        reported ? 1 : 0,
        reported ? 0 : 1,
        containerName,
      ],
    );
    return row ? { namespace: String(row.namespace), name: String(row.name) } : undefined;
  }

  async getRequest(
    namespace: string,
    name: string,
    requestId: string,
  ): Promise<HarnessRequestRecord | undefined> {
    const row = await this.#db.get(
      "SELECT * FROM harness_requests WHERE namespace = $1 AND name = $2 AND request_id = $3",
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
    const row = await this.#db.get(
      `UPDATE harness_requests SET cancel_requested_at = COALESCE(cancel_requested_at, $1)
       WHERE namespace = $2 AND name = $3 AND request_id = $4 AND finished_at IS NULL RETURNING *`,
      [now, namespace, name, requestId],
    );
    return row ? toHarnessRequest(row) : undefined;
  }

  async reapStaleRequests(cutoff: string, now: string): Promise<number> {
    return this.#db.transaction(async (tx) => {
      const stale = await this.#db.all(
        `UPDATE harness_requests SET finished_at = $1, outcome = 'failed'
         WHERE finished_at IS NULL AND started_at < $2 RETURNING namespace, name`,
        [now, cutoff],
        tx,
      );
      for (const row of stale)
        await this.#db.run(
          `UPDATE harness_sessions SET active_requests = GREATEST(active_requests - 1, 0), error_count = error_count + 1,
             usage_unavailable = usage_unavailable + 1
           WHERE namespace = $1 AND name = $2`,
          [String(row.namespace), String(row.name)],
          tx,
        );
      return stale.length;
    });
  }
}

class DuplicateRequest extends Error {
  override name = "DuplicateRequest";
}
