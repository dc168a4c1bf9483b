import { randomUUID } from "node:crypto";
import type pg from "pg";
import { z } from "zod";
import { RunnerCommand } from "../../contracts/runner-protocol.ts";
import type { KeyedLocks } from "../lifecycle/keyed-mutex.ts";
import type { Outcome, RelayChunk } from "../lifecycle/runner-directory.ts";
import type { Logger } from "../observability/log.ts";
import type { PostgresDatabase } from "../store/postgres-database.ts";
import type { RunnerRecord, StoredFrame } from "../store/store.ts";
import { PostgresSessionLocks } from "./postgres-session-locks.ts";
import type {
  ForwardedCommand,
  ForwardedCommandHandler,
  FrameFanout,
  RemoteLink,
  ReplicaCluster,
} from "./replica-cluster.ts";

/** NOTIFY channels; the payload names the schema (frames, links) or the replica (mailbox). */
const CHANNELS = {
  mailbox: "agent_sessions_mailbox",
  frames: "agent_sessions_frames",
  links: "agent_sessions_links",
} as const;

/** What one replica leaves another in `replica_messages` (validated when read). */
const ReplicaMessage = z.discriminatedUnion("kind", [
  z.object({
    kind: z.literal("command"),
    call_id: z.string(),
    from: z.string(),
    runner_id: z.string(),
    command: RunnerCommand,
    timeout_ms: z.number().int().positive(),
  }),
  z.object({
    kind: z.literal("chunk"),
    call_id: z.string(),
    chunk: z.object({
      relay_id: z.string(),
      data: z.string(),
      done: z.boolean(),
      status: z.number().int().optional(),
    }),
  }),
  z.object({
    kind: z.literal("outcome"),
    call_id: z.string(),
    outcome: z.union([
      z.object({ ok: z.literal(true), result: z.unknown() }),
      z.object({
        ok: z.literal(false),
        error: z.object({ code: z.string(), message: z.string() }).passthrough(),
      }),
    ]),
  }),
]);
type ReplicaMessage = z.infer<typeof ReplicaMessage>;

export type PostgresReplicaClusterOptions = {
  db: PostgresDatabase;
  log: Logger;
  /** Every runner record (the store's): links are read as ids, followers need the records. */
  listRunners: () => Promise<RunnerRecord[]>;
  /** Frames in the store after a global frame id (the store's `readFrames`). */
  readFrames: (query: { after: number; limit: number }) => Promise<StoredFrame[]>;
  /** This replica's followers (the event bus). */
  publish: (frame: StoredFrame) => void;
  /** @default a random UUID */
  replicaId?: string;
  /** How often this replica says it lives and reads the links. @default 1000 */
  heartbeatMs?: number;
  /** A replica silent this long is dead: its links no longer count. @default 5000 */
  replicaTtlMs?: number;
  /** How often a replica without the lease tries to take it. @default 1000 */
  leasePollMs?: number;
  /** Extra time a forwarded command gets beyond its own deadline (two mailbox trips). @default 5000 */
  forwardSlackMs?: number;
};

type PendingForward = {
  replicaId: string;
  onChunk: (chunk: RelayChunk) => void;
  resolve: (outcome: Outcome<unknown>) => void;
  timer: NodeJS.Timeout;
};

/**
 * Several `serve` replicas over one PostgreSQL database (replica-cluster.ts says what is
 * shared). Its own connections beside the pool: one LISTENs, one holds the advisory locks.
 */
export class PostgresReplicaCluster implements ReplicaCluster {
  readonly replicaId: string;
  readonly shared = true;
  readonly locks: KeyedLocks;
  readonly frames: FrameFanout;
  readonly #o: PostgresReplicaClusterOptions;
  readonly #heartbeatMs: number;
  readonly #ttlMs: number;
  readonly #slackMs: number;
  readonly #sessionLocks: PostgresSessionLocks;
  #listener: pg.Client | undefined;
  #heartbeat: NodeJS.Timeout | undefined;
  #remote = new Map<string, RemoteLink>();
  #liveReplicas = new Set<string>();
  readonly #pending = new Map<string, PendingForward>();
  #handler: ForwardedCommandHandler | undefined;
  #lastFrameId = 0;
  readonly #mailboxDrain: Drain;
  readonly #frameDrain: Drain;
  #notifyingFrames: Promise<void> | undefined;
  #framesWrittenAgain = false;
  #closed = false;

  private constructor(options: PostgresReplicaClusterOptions) {
    this.#o = options;
    this.replicaId = options.replicaId ?? randomUUID();
    this.#heartbeatMs = options.heartbeatMs ?? 1_000;
    this.#ttlMs = options.replicaTtlMs ?? 5_000;
    this.#slackMs = options.forwardSlackMs ?? 5_000;
    this.#sessionLocks = new PostgresSessionLocks({
      db: options.db,
      log: options.log,
      leasePollMs: options.leasePollMs ?? 1_000,
      connectionName: `agent-sessions locks ${this.replicaId}`,
    });
    this.locks = (scope) => this.#sessionLocks.lock(scope);
    this.#mailboxDrain = new Drain(() => this.#readMailbox(), this.#failed("reading the mailbox"));
    this.#frameDrain = new Drain(() => this.#readFrames(), this.#failed("reading new frames"));
    this.frames = { written: () => this.#framesWritten() };
  }

  /** Join: say this replica lives, read the links, LISTEN, then compete for the lease. */
  static async start(options: PostgresReplicaClusterOptions): Promise<PostgresReplicaCluster> {
    const cluster = new PostgresReplicaCluster(options);
    try {
      const last = await options.db.get("SELECT coalesce(max(id), 0) AS id FROM frames");
      cluster.#lastFrameId = Number(last?.id ?? 0);
      await cluster.#beat();
      await cluster.#listen();
      await cluster.#sessionLocks.start();
      cluster.#heartbeat = setInterval(() => {
        cluster.#beat().catch(cluster.#failed("the replica heartbeat"));
      }, cluster.#heartbeatMs);
    } catch (error) {
      await cluster.close();
      throw error;
    }
    return cluster;
  }

  leads(): boolean {
    return this.#sessionLocks.leads();
  }

  onLeadership(listener: (leading: boolean) => void): () => void {
    return this.#sessionLocks.onLeadership(listener);
  }

  async linkAttached(runnerId: string): Promise<void> {
    await this.#o.db.run(
      `INSERT INTO runner_links (runner_id, replica_id) VALUES ($1, $2)
       ON CONFLICT (runner_id) DO UPDATE SET replica_id = EXCLUDED.replica_id, attached_at = now()`,
      [runnerId, this.replicaId],
    );
    this.#remote.delete(runnerId);
    await this.#notify(CHANNELS.links, this.#o.db.schema);
  }

  async linkDetached(runnerId: string): Promise<void> {
    await this.#o.db.run("DELETE FROM runner_links WHERE runner_id = $1 AND replica_id = $2", [
      runnerId,
      this.replicaId,
    ]);
    await this.#notify(CHANNELS.links, this.#o.db.schema);
  }

  remoteLinks(): ReadonlyMap<string, RemoteLink> {
    return this.#remote;
  }

  async refreshLinks(): Promise<void> {
    const ttl = [this.#ttlMs];
    const live = await this.#o.db.all(
      "SELECT replica_id FROM replicas WHERE heartbeat_at > now() - $1 * interval '1 millisecond'",
      ttl,
    );
    const links = await this.#o.db.all(
      `SELECT l.runner_id, l.replica_id FROM runner_links l JOIN replicas r USING (replica_id)
       WHERE r.heartbeat_at > now() - $1 * interval '1 millisecond' AND l.replica_id <> $2`,
      [this.#ttlMs, this.replicaId],
    );
    const records = new Map((await this.#o.listRunners()).map((r) => [r.runner_id, r]));
    const remote = new Map<string, RemoteLink>();
    for (const row of links) {
      const runner = records.get(String(row.runner_id));
      if (runner) remote.set(runner.runner_id, { replicaId: String(row.replica_id), runner });
    }
    this.#remote = remote;
    this.#liveReplicas = new Set(live.map((row) => String(row.replica_id)));
    // A command on its way to a replica that died is answered now, not at its deadline.
    for (const [callId, pending] of this.#pending)
      if (!this.#liveReplicas.has(pending.replicaId))
        this.#settle(callId, {
          ok: false,
          error: { code: "UNAVAILABLE", message: "the server replica the runner was attached to is gone" },
        });
  }

  forward(replicaId: string, forwarded: ForwardedCommand): Promise<Outcome<unknown>> {
    const callId = randomUUID();
    return new Promise((resolve) => {
      const timer = setTimeout(
        () =>
          this.#settle(callId, {
            ok: false,
            error: {
              code: "DEADLINE_EXCEEDED",
              message: `runner ${forwarded.runnerId} did not answer through its replica in time`,
            },
          }),
        forwarded.timeoutMs + this.#slackMs,
      );
      this.#pending.set(callId, { replicaId, onChunk: forwarded.onChunk, resolve, timer });
      this.#send(replicaId, {
        kind: "command",
        call_id: callId,
        from: this.replicaId,
        runner_id: forwarded.runnerId,
        command: forwarded.command,
        timeout_ms: forwarded.timeoutMs,
      }).catch((error: unknown) =>
        this.#settle(callId, {
          ok: false,
          error: { code: "UNAVAILABLE", message: `the command could not be forwarded: ${String(error)}` },
        }),
      );
    });
  }

  serveForwarded(handler: ForwardedCommandHandler): void {
    this.#handler = handler;
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    clearInterval(this.#heartbeat);
    for (const callId of [...this.#pending.keys()])
      this.#settle(callId, {
        ok: false,
        error: { code: "UNAVAILABLE", message: "the server is shutting down" },
      });
    await this.#sessionLocks.close();
    const listener = this.#listener;
    this.#listener = undefined;
    await listener?.end().catch(() => {});
    await this.#mailboxDrain.idle();
    await this.#frameDrain.idle();
    await this.#notifyingFrames;
    if (this.#o.db.isOpen)
      await this.#o.db.run("DELETE FROM replicas WHERE replica_id = $1", [this.replicaId]).catch(() => {});
  }

  // ── liveness and notifications ────────────────────────────────────────────────────────────

  async #beat(): Promise<void> {
    if (this.#closed) return;
    await this.#o.db.run(
      `INSERT INTO replicas (replica_id) VALUES ($1)
       ON CONFLICT (replica_id) DO UPDATE SET heartbeat_at = now()`,
      [this.replicaId],
    );
    await this.refreshLinks();
    // The lease holder forgets replicas gone for an hour, and what was left for them.
    if (this.leads()) {
      await this.#o.db.run("DELETE FROM replicas WHERE heartbeat_at < now() - interval '1 hour'");
      await this.#o.db.run(
        `DELETE FROM replica_messages WHERE created_at < now() - interval '10 minutes'
           OR to_replica NOT IN (SELECT replica_id FROM replicas)`,
      );
    }
    if (!this.#listener && !this.#closed) await this.#listen(); // lost: LISTEN again, then catch up
  }

  async #listen(): Promise<void> {
    const client = await this.#o.db.dedicatedClient((error) => {
      this.#o.log("warn", "the LISTEN connection failed; listening again on the next heartbeat", {
        error: error.message,
      });
      if (this.#listener === client) this.#listener = undefined;
      void client.end().catch(() => {});
    }, `agent-sessions listen ${this.replicaId}`);
    client.on("notification", (message) => {
      const payload = message.payload ?? "";
      if (message.channel === CHANNELS.mailbox && payload === this.replicaId) this.#mailboxDrain.run();
      else if (payload !== this.#o.db.schema) return;
      else if (message.channel === CHANNELS.frames) this.#frameDrain.run();
      else if (message.channel === CHANNELS.links)
        this.refreshLinks().catch(this.#failed("reading the runner links"));
    });
    for (const channel of Object.values(CHANNELS)) await client.query(`LISTEN ${channel}`);
    if (this.#closed) {
      await client.end().catch(() => {});
      return;
    }
    this.#listener = client;
    // What was sent while nobody listened.
    this.#mailboxDrain.run();
    this.#frameDrain.run();
  }

  async #notify(channel: string, payload: string): Promise<void> {
    await this.#o.db.run("SELECT pg_notify($1, $2)", [channel, payload]);
  }

  #failed(what: string): (error: unknown) => void {
    return (error) => {
      if (!this.#closed) this.#o.log("warn", `replica cluster: ${what} failed`, { error: String(error) });
    };
  }

  // ── frames ────────────────────────────────────────────────────────────────────────────────

  /** Read back what was written here (in order with every replica's), and tell the others once. */
  #framesWritten(): void {
    this.#frameDrain.run();
    if (this.#notifyingFrames) {
      this.#framesWrittenAgain = true;
      return;
    }
    this.#notifyingFrames = (async () => {
      do {
        this.#framesWrittenAgain = false;
        await this.#notify(CHANNELS.frames, this.#o.db.schema).catch(this.#failed("announcing frames"));
      } while (this.#framesWrittenAgain && !this.#closed);
    })().finally(() => {
      this.#notifyingFrames = undefined;
    });
  }

  /**
   * Frames after the last one published here, in global id order. The store appends under a
   * frame-order lock (postgres-store.ts), so ids become visible in order and none is skipped.
   */
  async #readFrames(): Promise<void> {
    for (;;) {
      if (this.#closed || !this.#o.db.isOpen) return;
      const frames = await this.#o.readFrames({ after: this.#lastFrameId, limit: 500 });
      for (const frame of frames) {
        this.#lastFrameId = frame.id;
        this.#o.publish(frame);
      }
      if (frames.length < 500) return;
    }
  }

  // ── the mailbox ───────────────────────────────────────────────────────────────────────────

  async #send(replicaId: string, message: ReplicaMessage): Promise<void> {
    await this.#o.db.run(
      `WITH sent AS (INSERT INTO replica_messages (to_replica, body) VALUES ($1, $2) RETURNING id)
       SELECT pg_notify($3, $1) FROM sent`,
      [replicaId, JSON.stringify(message), CHANNELS.mailbox],
    );
  }

  async #readMailbox(): Promise<void> {
    for (;;) {
      if (this.#closed || !this.#o.db.isOpen) return;
      const rows = await this.#o.db.all(
        `DELETE FROM replica_messages WHERE id IN (
           SELECT id FROM replica_messages WHERE to_replica = $1 ORDER BY id LIMIT 200)
         RETURNING id, body`,
        [this.replicaId],
      );
      rows.sort((a, b) => Number(a.id) - Number(b.id));
      for (const row of rows) {
        const parsed = ReplicaMessage.safeParse(JSON.parse(String(row.body)));
        if (!parsed.success) {
          this.#o.log("warn", "replica cluster: an invalid message was dropped", { id: String(row.id) });
          continue;
        }
        this.#receive(parsed.data);
      }
      if (rows.length < 200) return;
    }
  }

  #receive(message: ReplicaMessage): void {
    switch (message.kind) {
      case "command":
        void this.#runForwarded(message);
        return;
      case "chunk":
        this.#pending.get(message.call_id)?.onChunk(message.chunk);
        return;
      case "outcome":
        this.#settle(message.call_id, message.outcome as Outcome<unknown>);
        return;
      default: {
        const exhaustive: never = message;
        throw new Error(`unknown replica message ${JSON.stringify(exhaustive)}`);
      }
    }
  }

  /** A command for a runner attached here; its chunks, then its outcome, go back in order. */
  async #runForwarded(message: Extract<ReplicaMessage, { kind: "command" }>): Promise<void> {
    let replies = Promise.resolve();
    const reply = (body: ReplicaMessage) => {
      replies = replies.then(() => this.#send(message.from, body)).catch(this.#failed("answering a command"));
    };
    const handler = this.#handler;
    const outcome: Outcome<unknown> = handler
      ? await handler({
          runnerId: message.runner_id,
          command: message.command,
          timeoutMs: message.timeout_ms,
          onChunk: (chunk) => reply({ kind: "chunk", call_id: message.call_id, chunk }),
        }).catch((error: unknown) => ({
          ok: false as const,
          error: { code: "INTERNAL" as const, message: String(error) },
        }))
      : { ok: false, error: { code: "UNAVAILABLE", message: "this replica takes no forwarded commands" } };
    reply({ kind: "outcome", call_id: message.call_id, outcome } as ReplicaMessage);
    await replies;
  }

  #settle(callId: string, outcome: Outcome<unknown>): void {
    const pending = this.#pending.get(callId);
    if (!pending) return;
    this.#pending.delete(callId);
    clearTimeout(pending.timer);
    pending.resolve(outcome);
  }
}

/** One run of a task at a time; asked again while it runs, it runs once more after. */
class Drain {
  readonly #task: () => Promise<void>;
  readonly #onError: (error: unknown) => void;
  #running: Promise<void> | undefined;
  #again = false;

  constructor(task: () => Promise<void>, onError: (error: unknown) => void) {
    this.#task = task;
    this.#onError = onError;
  }

  run(): void {
    if (this.#running) {
      this.#again = true;
      return;
    }
    this.#running = (async () => {
      do {
        this.#again = false;
        await this.#task().catch(this.#onError);
      } while (this.#again);
    })().finally(() => {
      this.#running = undefined;
    });
  }

  async idle(): Promise<void> {
    await this.#running;
  }
}
