import { randomBytes } from "node:crypto";
import { COMPASS_PROTOCOL, type Frame, type FrameType, type SessionState } from "../../contracts/compass.ts";
import { PgParams, type PgQueryable, type PostgresDatabase, pgPageSql } from "./postgres-database.ts";
import { relayRouteOf, toIdempotency, toRunner, toSession, toWorkspace } from "./store-rows.ts";
import type {
  ClaimResult,
  IdempotencyRecord,
  NewSession,
  NewWorkspace,
  PageQuery,
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

export type PostgresStoreOptions = {
  /** Frames kept per session; older ones are trimmed on append. @default 1000 */
  frameBufferSize?: number;
  /** @default () => new Date() */
  now?: () => Date;
};

/**
 * Frame appends take this transaction-scoped advisory lock after their session's row lock, so
 * global frame ids commit in the order they were drawn: a reader of `id > cursor` (the unfiltered
 * event stream, Last-Event-ID) never sees a later id before an earlier one and skips it.
 */
const FRAME_ORDER_LOCK = "agent-sessions:frames";

/** A stored frame's body up to its seq: the database appends the seq, a comma and the rest. */
const FRAME_PREFIX = `{"protocol":${JSON.stringify(COMPASS_PROTOCOL)},"seq":`;

/**
 * Appends that wait behind the append in flight go in one statement: at most this many frames,
 * and about this many bytes of frame JSON (one frame alone may be larger), per statement.
 */
const APPEND_BATCH_FRAMES = 500;
const APPEND_BATCH_BYTES = 1 << 20;

type NewFrame = { type: FrameType; ts: string; payload: Record<string, unknown> };

/** An `appendFrame` call waiting for its batch's statement. */
type PendingAppend = {
  sessionId: string;
  /** The frame's JSON without its opening brace, `protocol` and `seq` (the database adds those). */
  rest: string;
  frame: Frame;
  resolve(stored: StoredFrame | undefined): void;
  reject(error: unknown): void;
};

/**
 * One at a time, in call order: what `inOrder` runs. A failed task does not stop the next.
 */
class SerialQueue {
  #tail: Promise<unknown> = Promise.resolve();
  run<T>(task: () => Promise<T>): Promise<T> {
    const result = this.#tail.then(task, task);
    this.#tail = result.catch(() => {});
    return result;
  }
}

/**
 * The Store on PostgreSQL (several server replicas over one database). Every method is one
 * statement or one transaction; uniqueness is the schema's constraints (postgres-migrations.ts).
 */
export class PostgresStore implements Store {
  readonly #db: PostgresDatabase;
  readonly #frameBufferSize: number;
  readonly #now: () => Date;
  /**
   * Frame appends (and transitions, which append) of this process, one after another: the
   * journal publishes each frame when its append resolves, and event followers skip ids at or
   * below the last they sent, so appends must resolve in id order. Concurrent transactions on
   * several connections would commit in id order (FRAME_ORDER_LOCK) but resolve in whatever
   * order their replies arrive.
   */
  readonly #appends = new SerialQueue();
  /**
   * The appends queued last on `#appends` and not yet running: a new append joins them, so a
   * burst costs a statement per batch, not a round trip per frame. A transition closes it (the
   * appends called after it go after it).
   */
  #openBatch: PendingAppend[] | undefined;

  /** `database` is the process's pool (migrated by `PostgresDatabase.open`); its owner closes it. */
  constructor(database: PostgresDatabase, options: PostgresStoreOptions = {}) {
    this.#db = database;
    this.#frameBufferSize = options.frameBufferSize ?? 1_000;
    this.#now = options.now ?? (() => new Date());
  }

  get isOpen(): boolean {
    return this.#db.isOpen;
  }

  async close(): Promise<void> {}

  // ── resources ────────────────────────────────────────────────────────────────────────────

  async putResource<R extends StoredResource>(
    resource: R,
    options: { ifAbsent?: boolean } = {},
  ): Promise<{ resource: R; created: boolean }> {
    const { namespace, name } = resource.metadata;
    const key = [resource.kind, namespace, name];
    for (;;) {
      const result = await this.#db.transaction(async (tx) => {
        const existing = await this.#db.get(
          "SELECT created_at, body FROM resources WHERE kind = $1 AND namespace = $2 AND name = $3 FOR UPDATE",
          key,
          tx,
        );
        if (existing && options.ifAbsent)
          return { resource: JSON.parse(String(existing.body)) as R, created: false };
        const now = this.#iso();
        const createdAt = existing ? String(existing.created_at) : now;
        const stored = {
          ...resource,
          metadata: { ...resource.metadata, creationTimestamp: createdAt },
        } as R;
        const written = existing
          ? await this.#db.run(
              "UPDATE resources SET body = $4, updated_at = $5 WHERE kind = $1 AND namespace = $2 AND name = $3",
              [...key, JSON.stringify(stored), now],
              tx,
            )
          : await this.#db.run(
              `INSERT INTO resources (kind, namespace, name, body, created_at, updated_at)
               VALUES ($1, $2, $3, $4, $5, $5) ON CONFLICT DO NOTHING`,
              [...key, JSON.stringify(stored), now],
              tx,
            );
        return written === 1 ? { resource: stored, created: !existing } : undefined;
      });
      // Undefined: another writer created it between our read and our insert; it exists now.
      if (result) return result;
    }
  }

  async getResource<K extends StoredKind>(
    kind: K,
    namespace: string,
    name: string,
  ): Promise<StoredOf<K> | undefined> {
    const row = await this.#db.get(
      "SELECT body FROM resources WHERE kind = $1 AND namespace = $2 AND name = $3",
      [kind, namespace, name],
    );
    return row ? (JSON.parse(String(row.body)) as StoredOf<K>) : undefined;
  }

  async listResources<K extends StoredKind>(
    kind: K,
    namespace: string | undefined,
    page?: PageQuery,
  ): Promise<StoredOf<K>[]> {
    const params = new PgParams();
    const where = [`kind = ${params.p(kind)}`];
    if (namespace !== undefined) where.push(`namespace = ${params.p(namespace)}`);
    const order = pgPageSql(namespace === undefined ? ["namespace", "name"] : ["name"], page, where, params);
    const rows = await this.#db.all(
      `SELECT body FROM resources WHERE ${where.join(" AND ")}${order}`,
      params.values,
    );
    return rows.map((row) => JSON.parse(String(row.body)) as StoredOf<K>);
  }

  async deleteResource<K extends StoredKind>(
    kind: K,
    namespace: string,
    name: string,
  ): Promise<StoredOf<K> | undefined> {
    const row = await this.#db.get(
      "DELETE FROM resources WHERE kind = $1 AND namespace = $2 AND name = $3 RETURNING body",
      [kind, namespace, name],
    );
    return row ? (JSON.parse(String(row.body)) as StoredOf<K>) : undefined;
  }

  // ── runners ──────────────────────────────────────────────────────────────────────────────

  async registerRunner(
    runner: Omit<RunnerRecord, "runner_id" | "last_seen_at" | "draining">,
  ): Promise<RunnerRecord> {
    const row = await this.#db.get(
      `INSERT INTO runners (runner_id, runner_name, engine, capacity, labels, last_seen_at) VALUES ($1, $2, $3, $4, $5, $6)
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
    const params = new PgParams();
    const where: string[] = [];
    const order = pgPageSql(["runner_name"], page, where, params);
    const rows = await this.#db.all(
      `SELECT * FROM runners ${where.length ? `WHERE ${where.join(" AND ")}` : ""}${order}`,
      params.values,
    );
    return rows.map(toRunner);
  }

  async findRunner(nameOrId: string): Promise<RunnerRecord | undefined> {
    const row =
      (await this.#db.get("SELECT * FROM runners WHERE runner_name = $1", [nameOrId])) ??
      (await this.#db.get("SELECT * FROM runners WHERE runner_id = $1", [nameOrId]));
    return row ? toRunner(row) : undefined;
  }

  async setRunnerDraining(runnerId: string, draining: boolean): Promise<RunnerRecord | undefined> {
    const row = await this.#db.get("UPDATE runners SET draining = $1 WHERE runner_id = $2 RETURNING *", [
      draining,
      runnerId,
    ]);
    return row ? toRunner(row) : undefined;
  }

  async claimRunnerCredential(runnerName: string, tokenHash: string): Promise<boolean> {
    return (
      (await this.#db.run(
        `INSERT INTO runner_credentials (runner_name, token_hash, created_at) VALUES ($1, $2, $3)
         ON CONFLICT (runner_name) DO NOTHING`,
        [runnerName, tokenHash, this.#iso()],
      )) === 1
    );
  }

  async replaceRunnerCredential(runnerName: string, tokenHash: string): Promise<void> {
    await this.#db.run(
      `INSERT INTO runner_credentials (runner_name, token_hash, created_at) VALUES ($1, $2, $3)
       ON CONFLICT (runner_name) DO UPDATE SET token_hash = excluded.token_hash, created_at = excluded.created_at`,
      [runnerName, tokenHash, this.#iso()],
    );
  }

  async findRunnerCredential(tokenHash: string): Promise<string | undefined> {
    const row = await this.#db.get("SELECT runner_name FROM runner_credentials WHERE token_hash = $1", [
      tokenHash,
    ]);
    return row ? String(row.runner_name) : undefined;
  }

  async deleteRunnerCredential(runnerName: string, tokenHash?: string): Promise<boolean> {
    const removed =
      tokenHash === undefined
        ? await this.#db.run("DELETE FROM runner_credentials WHERE runner_name = $1", [runnerName])
        : await this.#db.run("DELETE FROM runner_credentials WHERE runner_name = $1 AND token_hash = $2", [
            runnerName,
            tokenHash,
          ]);
    return removed === 1;
  }

  // ── idempotency keys ─────────────────────────────────────────────────────────────────────

  async claimIdempotencyKey(record: Omit<IdempotencyRecord, "created_at">): Promise<ClaimResult> {
    for (;;) {
      // The primary key decides: of concurrent claims (any replica) exactly one inserts.
      const inserted = await this.#db.run(
        `INSERT INTO idempotency_keys (scope, key, fingerprint, container_name, created_at)
         VALUES ($1, $2, $3, $4, $5) ON CONFLICT (scope, key) DO NOTHING`,
        [record.scope, record.key, record.fingerprint, record.container_name, this.#iso()],
      );
      if (inserted === 1) return { claimed: true };
      const existing = await this.getIdempotencyKey(record.scope, record.key);
      // Gone again (its workspace was deleted in between): claim afresh.
      if (existing) return { claimed: false, existing };
    }
  }

  async getIdempotencyKey(scope: string, key: string): Promise<IdempotencyRecord | undefined> {
    const row = await this.#db.get("SELECT * FROM idempotency_keys WHERE scope = $1 AND key = $2", [
      scope,
      key,
    ]);
    return row ? toIdempotency(row) : undefined;
  }

  // ── workspaces ───────────────────────────────────────────────────────────────────────────

  async insertWorkspace(w: NewWorkspace): Promise<WorkspaceRecord> {
    const now = this.#iso();
    const row = await this.#db.conflictAware(() =>
      this.#db.get(
        `INSERT INTO workspaces (container_name, agent_ref, workstream, client_request_id, runner_id, status,
           endpoint, spec, adapter_token, created_at, updated_at)
         VALUES ($1, $2, $3, $4, $5, 'provisioning', NULL, $6, $7, $8, $8) RETURNING *`,
        [
          w.container_name,
          w.agent_ref,
          w.workstream,
          w.client_request_id,
          w.runner_id,
          JSON.stringify(w.spec),
          w.adapter_token,
          now,
        ],
      ),
    );
    if (!row) throw new Error("workspace insert returned no row");
    return toWorkspace(row);
  }

  async getWorkspace(containerName: string): Promise<WorkspaceRecord | undefined> {
    const row = await this.#db.get("SELECT * FROM workspaces WHERE container_name = $1", [containerName]);
    return row ? toWorkspace(row) : undefined;
  }

  async getRelayRoute(containerName: string): Promise<RelayRoute | undefined> {
    const workspace = await this.getWorkspace(containerName);
    return workspace && relayRouteOf(workspace);
  }

  async findWorkspace(agentRef: string, workstream: string): Promise<WorkspaceRecord | undefined> {
    const row = await this.#db.get("SELECT * FROM workspaces WHERE agent_ref = $1 AND workstream = $2", [
      agentRef,
      workstream,
    ]);
    return row ? toWorkspace(row) : undefined;
  }

  async listWorkspaces(filter: { runnerId?: string; namespace?: string } = {}): Promise<WorkspaceRecord[]> {
    const rows =
      filter.namespace !== undefined
        ? // `ns/` ≤ agent_ref < `ns0` ('0' follows '/' in byte order): a range of the (agent_ref, workstream) index.
          await this.#db.all(
            "SELECT * FROM workspaces WHERE agent_ref >= $1 AND agent_ref < $2 ORDER BY created_at, container_name",
            [`${filter.namespace}/`, `${filter.namespace}0`],
          )
        : filter.runnerId === undefined
          ? await this.#db.all("SELECT * FROM workspaces ORDER BY created_at, container_name")
          : await this.#db.all(
              "SELECT * FROM workspaces WHERE runner_id = $1 ORDER BY created_at, container_name",
              [filter.runnerId],
            );
    return rows.map(toWorkspace);
  }

  async countWorkspacesByRunner(): Promise<Map<string, number>> {
    const rows = await this.#db.all("SELECT runner_id, COUNT(*) AS n FROM workspaces GROUP BY runner_id");
    return new Map(rows.map((row) => [String(row.runner_id), Number(row.n)]));
  }

  async updateWorkspace(
    containerName: string,
    patch: Partial<Pick<WorkspaceRecord, "status" | "endpoint" | "seeded_commit" | "seeded_snapshot">>,
  ): Promise<WorkspaceRecord | undefined> {
    const row = await this.#db.get(
      `UPDATE workspaces SET status = COALESCE($1, status), endpoint = COALESCE($2, endpoint),
         seeded_commit = COALESCE($3, seeded_commit), seeded_snapshot = COALESCE($4, seeded_snapshot), updated_at = $5
       WHERE container_name = $6 RETURNING *`,
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
    return this.#db.transaction(async (tx) => {
      await this.#db.run(
        "DELETE FROM frames WHERE session_id IN (SELECT session_id FROM sessions WHERE container_name = $1)",
        [containerName],
        tx,
      );
      await this.#db.run("DELETE FROM sessions WHERE container_name = $1", [containerName], tx);
      await this.#db.run("DELETE FROM idempotency_keys WHERE container_name = $1", [containerName], tx);
      return (
        (await this.#db.run("DELETE FROM workspaces WHERE container_name = $1", [containerName], tx)) > 0
      );
    });
  }

  // ── sessions ─────────────────────────────────────────────────────────────────────────────

  async insertSession(s: NewSession): Promise<SessionRecord> {
    const now = this.#iso();
    const row = await this.#db.conflictAware(() =>
      this.#db.get(
        `INSERT INTO sessions (session_id, container_name, agent_ref, state, reason, runner_id, last_seq, created_at, updated_at)
         VALUES ($1, $2, $3, $4, NULL, $5, 0, $6, $6) RETURNING *`,
        [s.session_id, s.container_name, s.agent_ref, s.state, s.runner_id, now],
      ),
    );
    if (!row) throw new Error("session insert returned no row");
    return toSession(row);
  }

  async getSession(sessionId: string): Promise<SessionRecord | undefined> {
    const row = await this.#db.get("SELECT * FROM sessions WHERE session_id = $1", [sessionId]);
    return row ? toSession(row) : undefined;
  }

  async listSessions(filter: SessionFilter = {}, page?: PageQuery): Promise<SessionRecord[]> {
    const params = new PgParams();
    const where: string[] = [];
    if (filter.runnerId !== undefined) where.push(`runner_id = ${params.p(filter.runnerId)}`);
    if (filter.containerName !== undefined) where.push(`container_name = ${params.p(filter.containerName)}`);
    if (filter.agentRef !== undefined) where.push(`agent_ref = ${params.p(filter.agentRef)}`);
    if (filter.namespaces !== undefined) {
      if (filter.namespaces.length === 0) return [];
      // `ns/` ≤ agent_ref < `ns0`, as listWorkspaces reads one namespace.
      where.push(
        `(${filter.namespaces.map((ns) => `(agent_ref >= ${params.p(`${ns}/`)} AND agent_ref < ${params.p(`${ns}0`)})`).join(" OR ")})`,
      );
    }
    if (filter.states !== undefined) {
      if (filter.states.length === 0) return [];
      where.push(`state = ANY(${params.p(filter.states)})`);
    }
    const order = pgPageSql(["created_at", "session_id"], page, where, params);
    const rows = await this.#db.all(
      `SELECT * FROM sessions ${where.length ? `WHERE ${where.join(" AND ")}` : ""}${order}`,
      params.values,
    );
    return rows.map(toSession);
  }

  async countSessionsByState(): Promise<Map<SessionState, number>> {
    const rows = await this.#db.all("SELECT state, COUNT(*) AS n FROM sessions GROUP BY state");
    return new Map(rows.map((row) => [String(row.state) as SessionState, Number(row.n)]));
  }

  async transitionSession(sessionId: string, change: SessionChange): Promise<Transition | undefined> {
    this.#openBatch = undefined;
    return this.#appends.run(() => this.#transition(sessionId, change));
  }

  async #transition(sessionId: string, change: SessionChange): Promise<Transition | undefined> {
    return this.#db.transaction(async (tx) => {
      // The row lock makes the compare-and-set atomic across replicas.
      const current = await this.#db.get(
        "SELECT state FROM sessions WHERE session_id = $1 FOR UPDATE",
        [sessionId],
        tx,
      );
      if (!current) return undefined;
      const previous = String(current.state) as SessionState;
      if (previous === change.state) return undefined;
      if (change.from && !change.from.includes(previous)) return undefined;
      const now = this.#iso();
      await this.#db.run(
        "UPDATE sessions SET state = $1, reason = $2, updated_at = $3 WHERE session_id = $4",
        [change.state, change.reason ?? null, now, sessionId],
        tx,
      );
      const payload: Record<string, unknown> = { state: change.state };
      if (change.reason !== undefined) payload.reason = change.reason;
      const frame = await this.#appendFrame(tx, sessionId, { type: "status", ts: now, payload });
      const session = await this.#db.get("SELECT * FROM sessions WHERE session_id = $1", [sessionId], tx);
      if (!frame || !session) throw new Error(`session ${sessionId} vanished inside a transaction`);
      return { session: toSession(session), previous, frame };
    });
  }

  // ── frames ───────────────────────────────────────────────────────────────────────────────

  appendFrame(sessionId: string, frame: NewFrame): Promise<StoredFrame | undefined> {
    const rest = { session_id: sessionId, type: frame.type, ts: frame.ts, payload: frame.payload };
    return new Promise((resolve, reject) => {
      let batch = this.#openBatch;
      if (!batch) {
        const opened: PendingAppend[] = [];
        this.#openBatch = batch = opened;
        void this.#appends.run(() => {
          if (this.#openBatch === opened) this.#openBatch = undefined;
          return this.#appendBatch(opened);
        });
      }
      batch.push({
        sessionId,
        rest: JSON.stringify(rest).slice(1),
        frame: { protocol: COMPASS_PROTOCOL, seq: 0, ...rest },
        resolve,
        reject,
      });
    });
  }

  async readFrames(query: { sessionId?: string; after: number; limit: number }): Promise<StoredFrame[]> {
    const rows =
      query.sessionId === undefined
        ? await this.#db.all("SELECT id, body FROM frames WHERE id > $1 ORDER BY id LIMIT $2", [
            query.after,
            query.limit,
          ])
        : await this.#db.all(
            "SELECT id, body FROM frames WHERE session_id = $1 AND seq > $2 ORDER BY seq LIMIT $3",
            [query.sessionId, query.after, query.limit],
          );
    return rows.map((row) => ({ id: Number(row.id), frame: JSON.parse(String(row.body)) as Frame }));
  }

  /**
   * One batch of `appendFrame` calls, in statements of at most APPEND_BATCH_FRAMES frames (and
   * about APPEND_BATCH_BYTES), one after another; each call resolves (or rejects with its
   * statement) in frame id order, which is call order. Never rejects itself.
   */
  async #appendBatch(batch: PendingAppend[]): Promise<void> {
    for (let from = 0; from < batch.length; ) {
      let to = from + 1;
      let bytes = batch[from]?.rest.length ?? 0;
      while (to < batch.length && to - from < APPEND_BATCH_FRAMES) {
        bytes += batch[to]?.rest.length ?? 0;
        if (bytes > APPEND_BATCH_BYTES) break;
        to++;
      }
      const chunk = batch.slice(from, to);
      from = to;
      try {
        const stored =
          chunk.length === 1
            ? [await this.#appendOne(chunk[0] as PendingAppend)]
            : await this.#appendMany(chunk);
        const inIdOrder = chunk
          .map((append, i) => ({ append, stored: stored[i] }))
          .sort((a, b) => (a.stored?.id ?? 0) - (b.stored?.id ?? 0));
        for (const { append, stored } of inIdOrder) append.resolve(stored);
      } catch (error) {
        for (const append of chunk) append.reject(error);
      }
    }
  }

  /**
   * One append as one statement (one round trip; its own transaction): the next seq under the
   * row lock, the frame-order lock, the insert and the trim. The body is the frame's JSON with
   * the seq spliced in by the database, byte for byte what JSON.stringify gives.
   */
  async #appendOne(append: PendingAppend): Promise<StoredFrame | undefined> {
    const row = await this.#db.get(
      `WITH bumped AS (
         UPDATE sessions SET last_seq = last_seq + 1 WHERE session_id = $1
         RETURNING last_seq, pg_advisory_xact_lock(hashtext($2)) AS locked
       ), inserted AS (
         INSERT INTO frames (session_id, seq, body)
         SELECT $1, last_seq, $3::text || last_seq || ',' || $4::text FROM bumped RETURNING id, seq
       ), trimmed AS (
         DELETE FROM frames WHERE session_id = $1 AND seq <= (SELECT last_seq FROM bumped) - $5::bigint
       )
       SELECT id, seq FROM inserted`,
      [append.sessionId, this.#frameOrderLock(), FRAME_PREFIX, append.rest, this.#frameBufferSize],
    );
    if (!row) return undefined;
    return { id: Number(row.id), frame: { ...append.frame, seq: Number(row.seq) } };
  }

  /**
   * Several appends as one statement. The sessions' rows are locked in session id order (two
   * replicas' batches never wait on each other in a cycle), then the frame-order lock (after every
   * row lock, as a transition takes it); each frame gets its session's next seq in call order,
   * and ids are drawn in call order. A frame of a session that does not exist is not stored.
   */
  async #appendMany(chunk: PendingAppend[]): Promise<(StoredFrame | undefined)[]> {
    const rows = await this.#db.all(
      `WITH input AS (
         SELECT * FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS t(session_id, rest, ord)
       ), locked AS (
         SELECT session_id, last_seq FROM sessions
         WHERE session_id IN (SELECT session_id FROM input) ORDER BY session_id FOR UPDATE
       ), ordered AS (
         SELECT count(*) AS sessions, pg_advisory_xact_lock(hashtext($3)) AS locked FROM locked
       ), numbered AS (
         SELECT i.session_id, i.rest, i.ord,
                l.last_seq + row_number() OVER (PARTITION BY i.session_id ORDER BY i.ord) AS seq
         FROM input i JOIN locked l USING (session_id) CROSS JOIN ordered
       ), bumped AS (
         UPDATE sessions s SET last_seq = n.last_seq
         FROM (SELECT session_id, max(seq) AS last_seq FROM numbered GROUP BY session_id) n
         WHERE s.session_id = n.session_id RETURNING s.session_id, s.last_seq
       ), inserted AS (
         INSERT INTO frames (session_id, seq, body)
         SELECT session_id, seq, $4::text || seq || ',' || rest FROM numbered ORDER BY ord
         RETURNING id, session_id, seq
       ), trimmed AS (
         DELETE FROM frames f USING bumped b
         WHERE f.session_id = b.session_id AND f.seq <= b.last_seq - $5::bigint
       )
       SELECT id, session_id, seq FROM inserted ORDER BY id`,
      [
        chunk.map((a) => a.sessionId),
        chunk.map((a) => a.rest),
        this.#frameOrderLock(),
        FRAME_PREFIX,
        this.#frameBufferSize,
      ],
    );
    // Per session, its rows in seq order belong to its appends in call order.
    const bySession = new Map<string, { id: number; seq: number }[]>();
    for (const row of rows) {
      const id = String(row.session_id);
      const list = bySession.get(id) ?? [];
      list.push({ id: Number(row.id), seq: Number(row.seq) });
      bySession.set(id, list);
    }
    for (const list of bySession.values()) list.sort((a, b) => a.seq - b.seq);
    // The statement's trim sees only the rows from before it: a session given more frames than
    // its buffer in one batch (a small buffer) has its oldest new ones trimmed now.
    const over = [...bySession].filter(([, list]) => list.length > this.#frameBufferSize);
    if (over.length)
      await this.#db.run(
        `DELETE FROM frames f USING unnest($1::text[], $2::bigint[]) AS o(session_id, last_seq)
         WHERE f.session_id = o.session_id AND f.seq <= o.last_seq - $3::bigint`,
        [
          over.map(([id]) => id),
          over.map(([, list]) => list[list.length - 1]?.seq ?? 0),
          this.#frameBufferSize,
        ],
      );
    const taken = new Map<string, number>();
    return chunk.map((append) => {
      const list = bySession.get(append.sessionId);
      if (!list) return undefined;
      const k = taken.get(append.sessionId) ?? 0;
      taken.set(append.sessionId, k + 1);
      const row = list[k];
      if (!row) throw new Error(`frame ${k + 1} of session ${append.sessionId} missing from its batch`);
      return { id: row.id, frame: { ...append.frame, seq: row.seq } };
    });
  }

  #frameOrderLock(): string {
    return `${FRAME_ORDER_LOCK}:${this.#db.schema}`;
  }

  /** Inside a transaction: the next seq (row lock) with the frame-order lock, then the insert with the trim. */
  async #appendFrame(
    tx: PgQueryable,
    sessionId: string,
    frame: { type: FrameType; ts: string; payload: Record<string, unknown> },
  ): Promise<StoredFrame | undefined> {
    // The lock is taken in the same statement, after the session's row lock (never before it).
    const bumped = await this.#db.get(
      `UPDATE sessions SET last_seq = last_seq + 1 WHERE session_id = $1
       RETURNING last_seq, pg_advisory_xact_lock(hashtext($2)) AS locked`,
      [sessionId, this.#frameOrderLock()],
      tx,
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
    const inserted = await this.#db.get(
      `WITH trimmed AS (DELETE FROM frames WHERE session_id = $1 AND seq <= $4)
       INSERT INTO frames (session_id, seq, body) VALUES ($1, $2, $3) RETURNING id`,
      [sessionId, seq, JSON.stringify(full), seq - this.#frameBufferSize],
      tx,
    );
    if (!inserted) throw new Error("frame insert returned no row");
    return { id: Number(inserted.id), frame: full };
  }

  #iso(): string {
    return this.#now().toISOString();
  }
}
