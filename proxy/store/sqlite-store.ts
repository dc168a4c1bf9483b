import { randomBytes } from "node:crypto";
import { COMPASS_PROTOCOL, type Frame, type FrameType, type SessionState } from "../../contracts/compass.ts";
import type {
  PageQuery,
  ClaimResult,
  IdempotencyRecord,
  NewSession,
  NewWorkspace,
  RelayRoute,
  RunnerRecord,
  SessionChange,
  SessionFilter,
  SessionRecord,
  Store,
  StoredFrame,
  StoredKind,
  StoredOf,
  StoredResource,
  Transition,
  WorkspaceRecord,
} from "./store.ts";
import type { SQLInputValue } from "node:sqlite";
import { pageSql, type SqliteDatabase, storeConnection } from "./sqlite-database.ts";
import { toIdempotency, toRelayRoute, toRunner, toSession, toWorkspace } from "./store-rows.ts";

export type SqliteStoreOptions = {
  /** Frames kept per session; older ones are trimmed on append. @default 1000 */
  frameBufferSize?: number;
  /** @default () => new Date() */
  now?: () => Date;
};

const SCHEMA = `
CREATE TABLE IF NOT EXISTS resources (
  kind TEXT NOT NULL, namespace TEXT NOT NULL, name TEXT NOT NULL,
  body TEXT NOT NULL, created_at TEXT NOT NULL, updated_at TEXT NOT NULL,
  PRIMARY KEY (kind, namespace, name)
);
CREATE TABLE IF NOT EXISTS runners (
  runner_id TEXT PRIMARY KEY, runner_name TEXT NOT NULL UNIQUE, engine TEXT NOT NULL,
  capacity INTEGER NOT NULL, labels TEXT NOT NULL, last_seen_at TEXT NOT NULL,
  draining INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS runner_credentials (
  runner_name TEXT PRIMARY KEY, token_hash TEXT NOT NULL UNIQUE, created_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS workspaces (
  container_name TEXT PRIMARY KEY, agent_ref TEXT NOT NULL, workstream TEXT NOT NULL,
  client_request_id TEXT NOT NULL UNIQUE, runner_id TEXT NOT NULL, status TEXT NOT NULL,
  endpoint TEXT, spec TEXT NOT NULL, adapter_token TEXT NOT NULL,
  created_at TEXT NOT NULL, updated_at TEXT NOT NULL, seeded_commit TEXT, seeded_snapshot TEXT,
  UNIQUE (agent_ref, workstream)
);
CREATE TABLE IF NOT EXISTS idempotency_keys (
  scope TEXT NOT NULL, key TEXT NOT NULL, fingerprint TEXT NOT NULL, container_name TEXT NOT NULL,
  created_at TEXT NOT NULL, PRIMARY KEY (scope, key)
);
CREATE TABLE IF NOT EXISTS sessions (
  session_id TEXT PRIMARY KEY, container_name TEXT NOT NULL, agent_ref TEXT NOT NULL,
  state TEXT NOT NULL, reason TEXT, runner_id TEXT NOT NULL, last_seq INTEGER NOT NULL DEFAULT 0,
  created_at TEXT NOT NULL, updated_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS workspaces_by_runner ON workspaces (runner_id);
CREATE INDEX IF NOT EXISTS sessions_by_container ON sessions (container_name);
CREATE INDEX IF NOT EXISTS sessions_by_runner ON sessions (runner_id);
CREATE INDEX IF NOT EXISTS sessions_by_agent ON sessions (agent_ref);
CREATE TABLE IF NOT EXISTS frames (
  id INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT NOT NULL, seq INTEGER NOT NULL,
  body TEXT NOT NULL, UNIQUE (session_id, seq)
);
`;

/** The embedded store: one SQLite file in WAL mode (readers never block the writer). */
export class SqliteStore implements Store {
  readonly #db: SqliteDatabase;
  /** Whether this store opened the connection (and closes it), or shares the process's. */
  readonly #ownsDb: boolean;
  readonly #frameBufferSize: number;
  readonly #now: () => Date;

  /** `database`: a path (a connection of its own) or the process's shared connection. */
  constructor(database: string | SqliteDatabase, options: SqliteStoreOptions = {}) {
    ({ db: this.#db, owned: this.#ownsDb } = storeConnection(database));
    this.#frameBufferSize = options.frameBufferSize ?? 1_000;
    this.#now = options.now ?? (() => new Date());
    this.#db.exec(SCHEMA);
    this.#migrate();
  }

  /** Columns added after a table was first created (CREATE TABLE IF NOT EXISTS leaves old tables as they are). */
  #migrate(): void {
    const columns = this.#db.all("PRAGMA table_info(runners)").map((row) => String(row.name));
    if (!columns.includes("draining"))
      this.#db.exec("ALTER TABLE runners ADD COLUMN draining INTEGER NOT NULL DEFAULT 0");
    const workspaceColumns = this.#db.all("PRAGMA table_info(workspaces)").map((row) => String(row.name));
    // Issue 34 item 12: a workspace made before has none (its diff says so).
    if (!workspaceColumns.includes("seeded_commit"))
      this.#db.exec("ALTER TABLE workspaces ADD COLUMN seeded_commit TEXT");
    // Issue 38: the snapshot a fork's workspace was seeded from.
    if (!workspaceColumns.includes("seeded_snapshot"))
      this.#db.exec("ALTER TABLE workspaces ADD COLUMN seeded_snapshot TEXT");
  }

  get isOpen(): boolean {
    return this.#db.isOpen;
  }

  async close(): Promise<void> {
    if (this.#ownsDb) this.#db.close();
  }

  // ── resources ────────────────────────────────────────────────────────────────────────────

  async putResource<R extends StoredResource>(
    resource: R,
    options: { ifAbsent?: boolean } = {},
  ): Promise<{ resource: R; created: boolean }> {
    return this.#db.transaction(() => {
      const { namespace, name } = resource.metadata;
      const existing = this.#db.get(
        "SELECT created_at, body FROM resources WHERE kind = ? AND namespace = ? AND name = ?",
        [resource.kind, namespace, name],
      );
      if (existing && options.ifAbsent)
        return { resource: JSON.parse(String(existing.body)) as R, created: false };
      const now = this.#iso();
      const createdAt = existing ? String(existing.created_at) : now;
      const stored = {
        ...resource,
        metadata: { ...resource.metadata, creationTimestamp: createdAt },
      } as R;
      this.#db.run(
        `INSERT INTO resources (kind, namespace, name, body, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?)
         ON CONFLICT (kind, namespace, name) DO UPDATE SET body = excluded.body, updated_at = excluded.updated_at`,
        [resource.kind, namespace, name, JSON.stringify(stored), createdAt, now],
      );
      return { resource: stored, created: !existing };
    });
  }

  async getResource<K extends StoredKind>(
    kind: K,
    namespace: string,
    name: string,
  ): Promise<StoredOf<K> | undefined> {
    const row = this.#db.get("SELECT body FROM resources WHERE kind = ? AND namespace = ? AND name = ?", [
      kind,
      namespace,
      name,
    ]);
    return row ? (JSON.parse(String(row.body)) as StoredOf<K>) : undefined;
  }

  async listResources<K extends StoredKind>(
    kind: K,
    namespace: string | undefined,
    page?: PageQuery,
  ): Promise<StoredOf<K>[]> {
    const where = ["kind = ?"];
    const params: SQLInputValue[] = [kind];
    if (namespace !== undefined) {
      where.push("namespace = ?");
      params.push(namespace);
    }
    const order = pageSql(namespace === undefined ? ["namespace", "name"] : ["name"], page, where, params);
    const sql = `SELECT body FROM resources WHERE ${where.join(" AND ")}${order}`;
    return this.#db.all(sql, params).map((row) => JSON.parse(String(row.body)) as StoredOf<K>);
  }

  async deleteResource<K extends StoredKind>(
    kind: K,
    namespace: string,
    name: string,
  ): Promise<StoredOf<K> | undefined> {
    const row = this.#db.get(
      "DELETE FROM resources WHERE kind = ? AND namespace = ? AND name = ? RETURNING body",
      [kind, namespace, name],
    );
    return row ? (JSON.parse(String(row.body)) as StoredOf<K>) : undefined;
  }

  // ── runners ──────────────────────────────────────────────────────────────────────────────

  async registerRunner(
    runner: Omit<RunnerRecord, "runner_id" | "last_seen_at" | "draining">,
  ): Promise<RunnerRecord> {
    const row = this.#db.get(
      `INSERT INTO runners (runner_id, runner_name, engine, capacity, labels, last_seen_at) VALUES (?, ?, ?, ?, ?, ?)
       ON CONFLICT (runner_name) DO UPDATE SET engine = excluded.engine, capacity = excluded.capacity,
         labels = excluded.labels, last_seen_at = excluded.last_seen_at
       RETURNING *`,
      [
        `runner-${randomBytes(6).toString("hex")}`,
        runner.runner_name,
        runner.engine,
        runner.capacity,
        JSON.stringify(runner.labels),
        this.#iso(),
      ],
    );
    if (!row) throw new Error("runner upsert returned no row");
    return toRunner(row);
  }

  async listRunners(page?: PageQuery): Promise<RunnerRecord[]> {
    const where: string[] = [];
    const params: SQLInputValue[] = [];
    const order = pageSql(["runner_name"], page, where, params);
    return this.#db
      .all(`SELECT * FROM runners ${where.length ? `WHERE ${where.join(" AND ")}` : ""}${order}`, params)
      .map(toRunner);
  }

  async findRunner(nameOrId: string): Promise<RunnerRecord | undefined> {
    const row =
      this.#db.get("SELECT * FROM runners WHERE runner_name = ?", [nameOrId]) ??
      this.#db.get("SELECT * FROM runners WHERE runner_id = ?", [nameOrId]);
    return row ? toRunner(row) : undefined;
  }

  async setRunnerDraining(runnerId: string, draining: boolean): Promise<RunnerRecord | undefined> {
    const row = this.#db.get("UPDATE runners SET draining = ? WHERE runner_id = ? RETURNING *", [
      draining ? 1 : 0,
      runnerId,
    ]);
    return row ? toRunner(row) : undefined;
  }

  async claimRunnerCredential(runnerName: string, tokenHash: string): Promise<boolean> {
    return (
      this.#db.run(
        "INSERT INTO runner_credentials (runner_name, token_hash, created_at) VALUES (?, ?, ?) ON CONFLICT (runner_name) DO NOTHING",
        [runnerName, tokenHash, this.#iso()],
      ) === 1
    );
  }

  async replaceRunnerCredential(runnerName: string, tokenHash: string): Promise<void> {
    this.#db.run(
      `INSERT INTO runner_credentials (runner_name, token_hash, created_at) VALUES (?, ?, ?)
       ON CONFLICT (runner_name) DO UPDATE SET token_hash = excluded.token_hash, created_at = excluded.created_at`,
      [runnerName, tokenHash, this.#iso()],
    );
  }

  async findRunnerCredential(tokenHash: string): Promise<string | undefined> {
    const row = this.#db.get("SELECT runner_name FROM runner_credentials WHERE token_hash = ?", [tokenHash]);
    return row ? String(row.runner_name) : undefined;
  }

  async deleteRunnerCredential(runnerName: string, tokenHash?: string): Promise<boolean> {
    return tokenHash === undefined
      ? this.#db.run("DELETE FROM runner_credentials WHERE runner_name = ?", [runnerName]) === 1
      : this.#db.run("DELETE FROM runner_credentials WHERE runner_name = ? AND token_hash = ?", [
          runnerName,
          tokenHash,
        ]) === 1;
  }

  // ── idempotency keys ─────────────────────────────────────────────────────────────────────

  async claimIdempotencyKey(record: Omit<IdempotencyRecord, "created_at">): Promise<ClaimResult> {
    return this.#db.transaction(() => {
      const existing = this.#db.get("SELECT * FROM idempotency_keys WHERE scope = ? AND key = ?", [
        record.scope,
        record.key,
      ]);
      if (existing) return { claimed: false, existing: toIdempotency(existing) };
      this.#db.run(
        "INSERT INTO idempotency_keys (scope, key, fingerprint, container_name, created_at) VALUES (?, ?, ?, ?, ?)",
        [record.scope, record.key, record.fingerprint, record.container_name, this.#iso()],
      );
      return { claimed: true };
    });
  }

  async getIdempotencyKey(scope: string, key: string): Promise<IdempotencyRecord | undefined> {
    const row = this.#db.get("SELECT * FROM idempotency_keys WHERE scope = ? AND key = ?", [scope, key]);
    return row ? toIdempotency(row) : undefined;
  }

  // ── workspaces ───────────────────────────────────────────────────────────────────────────

  async insertWorkspace(w: NewWorkspace): Promise<WorkspaceRecord> {
    const now = this.#iso();
    const row = this.#db.conflictAware(() =>
      this.#db.get(
        `INSERT INTO workspaces (container_name, agent_ref, workstream, client_request_id, runner_id, status,
           endpoint, spec, adapter_token, created_at, updated_at)
         VALUES (?, ?, ?, ?, ?, 'provisioning', NULL, ?, ?, ?, ?) RETURNING *`,
        [
          w.container_name,
          w.agent_ref,
          w.workstream,
          w.client_request_id,
          w.runner_id,
          JSON.stringify(w.spec),
          w.adapter_token,
          now,
          now,
        ],
      ),
    );
    if (!row) throw new Error("workspace insert returned no row");
    return toWorkspace(row);
  }

  async getWorkspace(containerName: string): Promise<WorkspaceRecord | undefined> {
    const row = this.#db.get("SELECT * FROM workspaces WHERE container_name = ?", [containerName]);
    return row ? toWorkspace(row) : undefined;
  }

  async getRelayRoute(containerName: string): Promise<RelayRoute | undefined> {
    const row = this.#db.get(
      `SELECT runner_id, agent_ref, json_extract(spec, '$.streaming') AS streaming,
         json_extract(spec, '$.session.protocol') AS protocol FROM workspaces WHERE container_name = ?`,
      [containerName],
    );
    return row ? toRelayRoute(containerName, row) : undefined;
  }

  async findWorkspace(agentRef: string, workstream: string): Promise<WorkspaceRecord | undefined> {
    const row = this.#db.get("SELECT * FROM workspaces WHERE agent_ref = ? AND workstream = ?", [
      agentRef,
      workstream,
    ]);
    return row ? toWorkspace(row) : undefined;
  }

  async listWorkspaces(filter: { runnerId?: string; namespace?: string } = {}): Promise<WorkspaceRecord[]> {
    const rows =
      filter.namespace !== undefined
        ? // `ns/` ≤ agent_ref < `ns0` ('0' follows '/'): a range of the (agent_ref, workstream) index.
          this.#db.all(
            "SELECT * FROM workspaces WHERE agent_ref >= ? AND agent_ref < ? ORDER BY created_at, container_name",
            [`${filter.namespace}/`, `${filter.namespace}0`],
          )
        : filter.runnerId === undefined
          ? this.#db.all("SELECT * FROM workspaces ORDER BY created_at, container_name")
          : this.#db.all("SELECT * FROM workspaces WHERE runner_id = ? ORDER BY created_at, container_name", [
              filter.runnerId,
            ]);
    return rows.map(toWorkspace);
  }

  async countWorkspacesByRunner(): Promise<Map<string, number>> {
    const rows = this.#db.all("SELECT runner_id, COUNT(*) AS n FROM workspaces GROUP BY runner_id");
    return new Map(rows.map((row) => [String(row.runner_id), Number(row.n)]));
  }

  async updateWorkspace(
    containerName: string,
    patch: Partial<Pick<WorkspaceRecord, "status" | "endpoint" | "seeded_commit" | "seeded_snapshot">>,
  ): Promise<WorkspaceRecord | undefined> {
    const row = this.#db.get(
      `UPDATE workspaces SET status = COALESCE(?, status), endpoint = COALESCE(?, endpoint),
         seeded_commit = COALESCE(?, seeded_commit), seeded_snapshot = COALESCE(?, seeded_snapshot), updated_at = ?
       WHERE container_name = ? RETURNING *`,
      [
        patch.status ?? null,
        patch.endpoint ?? null,
        patch.seeded_commit ?? null,
        patch.seeded_snapshot ?? null,
        this.#iso(),
        containerName,
      ],
    );
    return row ? toWorkspace(row) : undefined;
  }

  async deleteWorkspace(containerName: string): Promise<boolean> {
    return this.#db.transaction(() => {
      this.#db.run(
        "DELETE FROM frames WHERE session_id IN (SELECT session_id FROM sessions WHERE container_name = ?)",
        [containerName],
      );
      this.#db.run("DELETE FROM sessions WHERE container_name = ?", [containerName]);
      this.#db.run("DELETE FROM idempotency_keys WHERE container_name = ?", [containerName]);
      return this.#db.run("DELETE FROM workspaces WHERE container_name = ?", [containerName]) > 0;
    });
  }

  // ── sessions ─────────────────────────────────────────────────────────────────────────────

  async insertSession(s: NewSession): Promise<SessionRecord> {
    const now = this.#iso();
    const row = this.#db.conflictAware(() =>
      this.#db.get(
        `INSERT INTO sessions (session_id, container_name, agent_ref, state, reason, runner_id, last_seq, created_at, updated_at)
         VALUES (?, ?, ?, ?, NULL, ?, 0, ?, ?) RETURNING *`,
        [s.session_id, s.container_name, s.agent_ref, s.state, s.runner_id, now, now],
      ),
    );
    if (!row) throw new Error("session insert returned no row");
    return toSession(row);
  }

  async getSession(sessionId: string): Promise<SessionRecord | undefined> {
    const row = this.#db.get("SELECT * FROM sessions WHERE session_id = ?", [sessionId]);
    return row ? toSession(row) : undefined;
  }

  async listSessions(filter: SessionFilter = {}, page?: PageQuery): Promise<SessionRecord[]> {
    const where: string[] = [];
    const params: SQLInputValue[] = [];
    if (filter.runnerId !== undefined) {
      where.push("runner_id = ?");
      params.push(filter.runnerId);
    }
    if (filter.containerName !== undefined) {
      where.push("container_name = ?");
      params.push(filter.containerName);
    }
    if (filter.agentRef !== undefined) {
      where.push("agent_ref = ?");
      params.push(filter.agentRef);
    }
    if (filter.namespaces !== undefined) {
      if (filter.namespaces.length === 0) return [];
      // `ns/` ≤ agent_ref < `ns0` ('0' follows '/'), as listWorkspaces reads one namespace.
      where.push(`(${filter.namespaces.map(() => "(agent_ref >= ? AND agent_ref < ?)").join(" OR ")})`);
      for (const ns of filter.namespaces) params.push(`${ns}/`, `${ns}0`);
    }
    if (filter.states !== undefined) {
      if (filter.states.length === 0) return [];
      where.push(`state IN (${filter.states.map(() => "?").join(", ")})`);
      params.push(...filter.states);
    }
    const order = pageSql(["created_at", "session_id"], page, where, params);
    const sql = `SELECT * FROM sessions ${where.length ? `WHERE ${where.join(" AND ")}` : ""}${order}`;
    return this.#db.all(sql, params).map(toSession);
  }

  async countSessionsByState(): Promise<Map<SessionState, number>> {
    const rows = this.#db.all("SELECT state, COUNT(*) AS n FROM sessions GROUP BY state");
    return new Map(rows.map((row) => [String(row.state) as SessionState, Number(row.n)]));
  }

  async transitionSession(sessionId: string, change: SessionChange): Promise<Transition | undefined> {
    return this.#db.transaction(() => {
      const current = this.#db.get("SELECT * FROM sessions WHERE session_id = ?", [sessionId]);
      if (!current) return undefined;
      const previous = String(current.state) as SessionState;
      if (previous === change.state) return undefined;
      if (change.from && !change.from.includes(previous)) return undefined;
      const now = this.#iso();
      this.#db.run("UPDATE sessions SET state = ?, reason = ?, updated_at = ? WHERE session_id = ?", [
        change.state,
        change.reason ?? null,
        now,
        sessionId,
      ]);
      const payload: Record<string, unknown> = { state: change.state };
      if (change.reason !== undefined) payload.reason = change.reason;
      const frame = this.#appendFrame(sessionId, { type: "status", ts: now, payload });
      const session = this.#db.get("SELECT * FROM sessions WHERE session_id = ?", [sessionId]);
      if (!frame || !session) throw new Error(`session ${sessionId} vanished inside a transaction`);
      return { session: toSession(session), previous, frame };
    });
  }

  // ── frames ───────────────────────────────────────────────────────────────────────────────

  appendFrame(
    sessionId: string,
    frame: { type: FrameType; ts: string; payload: Record<string, unknown> },
    options: { grouped?: boolean } = {},
  ): Promise<StoredFrame | undefined> {
    // Grouped: one BEGIN/COMMIT and its WAL writes with this turn's other batched writes (a
    // relayed request's admission and settlement); a transaction asked for later commits after
    // it (sqlite-database.ts), so frames keep their order. Not an async method: the promises
    // are settled in commit order, and so are their callers resumed (the journal publishes in
    // that order).
    if (options.grouped) return this.#db.batched(() => this.#appendFrame(sessionId, frame));
    try {
      return Promise.resolve(this.#db.transaction(() => this.#appendFrame(sessionId, frame)));
    } catch (error) {
      return Promise.reject(error);
    }
  }

  async readFrames(query: { sessionId?: string; after: number; limit: number }): Promise<StoredFrame[]> {
    const rows =
      query.sessionId === undefined
        ? this.#db.all("SELECT id, body FROM frames WHERE id > ? ORDER BY id LIMIT ?", [
            query.after,
            query.limit,
          ])
        : this.#db.all("SELECT id, body FROM frames WHERE session_id = ? AND seq > ? ORDER BY seq LIMIT ?", [
            query.sessionId,
            query.after,
            query.limit,
          ]);
    return rows.map((row) => ({ id: Number(row.id), frame: JSON.parse(String(row.body)) as Frame }));
  }

  /** Inside a transaction: the next seq, the insert, the trim. */
  #appendFrame(
    sessionId: string,
    frame: { type: FrameType; ts: string; payload: Record<string, unknown> },
  ): StoredFrame | undefined {
    const bumped = this.#db.get(
      "UPDATE sessions SET last_seq = last_seq + 1 WHERE session_id = ? RETURNING last_seq",
      [sessionId],
    );
    if (!bumped) return undefined;
    const seq = Number(bumped.last_seq);
    const full: Frame = {
      protocol: COMPASS_PROTOCOL,
      seq,
      session_id: sessionId,
      type: frame.type,
      ts: frame.ts,
      payload: frame.payload,
    };
    const inserted = this.#db.get(
      "INSERT INTO frames (session_id, seq, body) VALUES (?, ?, ?) RETURNING id",
      [sessionId, seq, JSON.stringify(full)],
    );
    if (!inserted) throw new Error("frame insert returned no row");
    this.#db.run("DELETE FROM frames WHERE session_id = ? AND seq <= ?", [
      sessionId,
      seq - this.#frameBufferSize,
    ]);
    return { id: Number(inserted.id), frame: full };
  }

  // ── plumbing ─────────────────────────────────────────────────────────────────────────────

  #iso(): string {
    return this.#now().toISOString();
  }
}
