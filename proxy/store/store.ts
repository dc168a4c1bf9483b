import type { Frame, FrameType, SessionState } from "../../contracts/compass.ts";
import type { Resource, ResourceKind } from "../../contracts/resources.ts";
import type { SESSION_SNAPSHOT_KIND, SessionSnapshot } from "../../contracts/session-snapshot.ts";
import type { StoredWebhook, WEBHOOK_KIND } from "../../contracts/webhook.ts";
import type { Engine, SessionSpec } from "../../contracts/session-spec.ts";

/**
 * The server's persistent state. Every method is async and atomic on its own, so a PostgreSQL
 * implementation (several server replicas) can replace the embedded SQLite one; all SQL lives in
 * the implementation. Uniqueness the lifecycle relies on (a workspace's `client_request_id` and
 * `container_name`, an idempotency key) is enforced here, not only in process.
 */
export interface Store {
  /** False once closed (readiness). */
  readonly isOpen: boolean;
  close(): Promise<void>;

  /**
   * Create or replace. With `ifAbsent`, only create: an existing one is left as it is and
   * answered with `created: false` (the caller refuses: ALREADY_EXISTS).
   */
  putResource<R extends StoredResource>(
    resource: R,
    options?: { ifAbsent?: boolean },
  ): Promise<{ resource: R; created: boolean }>;
  getResource<K extends StoredKind>(
    kind: K,
    namespace: string,
    name: string,
  ): Promise<StoredOf<K> | undefined>;
  /**
   * One namespace's (by name), or every namespace's when `namespace` is undefined (by namespace,
   * name); with `page`, `page.limit + 1` at most after `page.after` ([name] or [namespace, name]).
   */
  listResources<K extends StoredKind>(
    kind: K,
    namespace: string | undefined,
    page?: PageQuery,
  ): Promise<StoredOf<K>[]>;
  /** The deleted resource, or undefined when there was none. */
  deleteResource<K extends StoredKind>(
    kind: K,
    namespace: string,
    name: string,
  ): Promise<StoredOf<K> | undefined>;

  /**
   * Upsert by `runner_name`: a runner keeps its id across reconnects and server restarts. Capacity,
   * labels and engine follow what it says now; `draining` is the server's and is kept.
   */
  registerRunner(
    runner: Omit<RunnerRecord, "runner_id" | "last_seen_at" | "draining">,
  ): Promise<RunnerRecord>;
  /** Every runner that ever attached, by name (with `page`: `limit + 1` at most after [name]). */
  listRunners(page?: PageQuery): Promise<RunnerRecord[]>;
  /** A runner by its name, else by its id. */
  findRunner(nameOrId: string): Promise<RunnerRecord | undefined>;
  /** Set (or clear) the drain flag; undefined when there is no such runner. */
  setRunnerDraining(runnerId: string, draining: boolean): Promise<RunnerRecord | undefined>;

  /**
   * Runner credentials (proxy/runners/runner-identity.ts), one per runner name, kept as a hash only.
   * `claimRunnerCredential` writes only when the name holds none yet (atomic: of two runners
   * registering one new name, one wins); false when the name is held.
   */
  claimRunnerCredential(runnerName: string, tokenHash: string): Promise<boolean>;
  /** Issue a credential whatever the name held before (an admin's rotation): the old one stops working. */
  replaceRunnerCredential(runnerName: string, tokenHash: string): Promise<void>;
  /** The runner name a credential hash belongs to. */
  findRunnerCredential(tokenHash: string): Promise<string | undefined>;
  /** Forget the name's credential (only when it is still `tokenHash`, if given); true when one was removed. */
  deleteRunnerCredential(runnerName: string, tokenHash?: string): Promise<boolean>;

  /** Claim `(scope, key)`; when it exists already, the existing record and nothing written. */
  claimIdempotencyKey(record: Omit<IdempotencyRecord, "created_at">): Promise<ClaimResult>;
  getIdempotencyKey(scope: string, key: string): Promise<IdempotencyRecord | undefined>;

  /** Throws `StoreConflictError` when the container name or the client_request_id exists. */
  insertWorkspace(workspace: NewWorkspace): Promise<WorkspaceRecord>;
  getWorkspace(containerName: string): Promise<WorkspaceRecord | undefined>;
  /**
   * What relaying a request to a workspace needs of its record, read narrowly (the relay's path
   * reads it once a request: the whole record's spec is parsed for nothing).
   */
  getRelayRoute(containerName: string): Promise<RelayRoute | undefined>;
  findWorkspace(agentRef: string, workstream: string): Promise<WorkspaceRecord | undefined>;
  /** Every workspace, one runner's, or one namespace's (its Agents' `namespace/name` refs). */
  listWorkspaces(filter?: { runnerId?: string; namespace?: string }): Promise<WorkspaceRecord[]>;
  /** How many workspaces each runner holds (for placement), counted without reading them. */
  countWorkspacesByRunner(): Promise<Map<string, number>>;
  updateWorkspace(
    containerName: string,
    patch: Partial<Pick<WorkspaceRecord, "status" | "endpoint" | "seeded_commit" | "seeded_snapshot">>,
  ): Promise<WorkspaceRecord | undefined>;
  /** Forget a workspace with its sessions, their frames and the idempotency keys naming it. */
  deleteWorkspace(containerName: string): Promise<boolean>;

  /** Throws `StoreConflictError` when the session id exists. */
  insertSession(session: NewSession): Promise<SessionRecord>;
  getSession(sessionId: string): Promise<SessionRecord | undefined>;
  /**
   * By creation (created_at, session_id); with `page`, `page.limit + 1` at most after
   * `page.after` = [created_at, session_id].
   */
  listSessions(filter?: SessionFilter, page?: PageQuery): Promise<SessionRecord[]>;
  /** How many retained sessions are in each state (metrics), counted without reading them. */
  countSessionsByState(): Promise<Map<SessionState, number>>;
  /**
   * Move a session to `state` and append its status frame (`type: "status"`, payload
   * `{state, reason}`) in one transaction. Nothing happens, and undefined is returned, when the
   * session is unknown, already in `state` (whatever the reason: a state is published once), or not
   * in one of `from`.
   */
  transitionSession(sessionId: string, change: SessionChange): Promise<Transition | undefined>;

  /**
   * Append a frame under the session's next seq, trimming its buffer; undefined if no such session.
   * Concurrent appends and transitions of one store resolve in frame id order (the journal
   * publishes each when it resolves, and followers skip ids below the last they sent).
   * `grouped`: the append may wait for this turn's other writes and commit with them (SQLite's
   * group commit: a relayed request's RequestFinished event commits with its settlement);
   * PostgreSQL batches every append anyway. @default false
   */
  appendFrame(
    sessionId: string,
    frame: { type: FrameType; ts: string; payload: Record<string, unknown> },
    options?: { grouped?: boolean },
  ): Promise<StoredFrame | undefined>;
  /** Frames after a cursor, oldest first: the per-session seq with a session, else the global id. */
  readFrames(query: { sessionId?: string; after: number; limit: number }): Promise<StoredFrame[]>;
}

/**
 * What the resources table keeps, one row a `(kind, namespace, name)`: the kinds served by
 * resource-routes.ts and SessionSnapshots (issue 38: their status is the server's, written
 * with the same put) and Webhooks (issue 40: their secret kept in the body, never answered).
 */
export type StoredKind = ResourceKind | typeof SESSION_SNAPSHOT_KIND | typeof WEBHOOK_KIND;
export type StoredResource = Resource | SessionSnapshot | StoredWebhook;
export type StoredOf<K extends StoredKind> = Extract<StoredResource, { kind: K }>;

/** Thrown when a uniqueness constraint refuses a write; tell it apart by `name`. */
export class StoreConflictError extends Error {
  override name = "StoreConflictError";
}

export type RunnerRecord = {
  runner_id: string;
  runner_name: string;
  engine: Engine;
  capacity: number;
  labels: Record<string, string>;
  /** Keeps its live sessions but takes no new placement (set by an admin, survives restarts). */
  draining: boolean;
  last_seen_at: string;
};

export type IdempotencyRecord = {
  /** The RPC the key belongs to: keys of different RPCs never collide. */
  scope: string;
  key: string;
  /** What the request asked for; a reused key with another fingerprint is refused. */
  fingerprint: string;
  container_name: string;
  created_at: string;
};
export type ClaimResult = { claimed: true } | { claimed: false; existing: IdempotencyRecord };

/**
 * A provisioned (or being provisioned) workspace: the container/pod + volume of one
 * `(agent, workstream)`, placed on one runner.
 */
export type WorkspaceStatus = "provisioning" | "ready" | "failed";
/** A workspace as the request relay and the gateway's reports need it (Store.getRelayRoute). */
export type RelayRoute = {
  container_name: string;
  runner_id: string;
  /** The Agent's `namespace/name`. */
  agent_ref: string;
  /** The runtime declares streaming (spec.streaming). */
  streaming: boolean;
  /** The runtime's session protocol (spec.session.protocol); absent: our adapter contract. */
  protocol: NonNullable<SessionSpec["session"]>["protocol"] | undefined;
};

export type WorkspaceRecord = {
  container_name: string;
  agent_ref: string;
  workstream: string;
  /** The request that created it. */
  client_request_id: string;
  runner_id: string;
  status: WorkspaceStatus;
  endpoint: string | undefined;
  spec: SessionSpec;
  /** The per-session adapter token, kept server-side; never returned by the API. */
  adapter_token: string;
  /**
   * The commit `spec.repo` was seeded at, as the provision that seeded it returned it: the diff's
   * baseline, kept here because the agent can write anything in the workspace (issue 34 item 12).
   * Undefined without a repository, and for a workspace seeded before servers recorded it.
   */
  seeded_commit: string | undefined;
  /**
   * The snapshot storage a fork's workspace was seeded from, as the provision that copied it
   * answered (`seeded_snapshot`, issue 38): once set, no provision carries `seedSnapshot` again.
   */
  seeded_snapshot: string | undefined;
  created_at: string;
  updated_at: string;
};
export type NewWorkspace = Omit<
  WorkspaceRecord,
  "created_at" | "updated_at" | "endpoint" | "status" | "seeded_commit" | "seeded_snapshot"
>;

export type SessionRecord = {
  session_id: string;
  container_name: string;
  agent_ref: string;
  state: SessionState;
  reason: string | undefined;
  runner_id: string;
  /** Seq of the session's latest frame (0 before any). */
  last_seq: number;
  created_at: string;
  updated_at: string;
};
export type NewSession = Pick<SessionRecord, "session_id" | "container_name" | "agent_ref" | "runner_id"> & {
  state: SessionState;
};
/**
 * A page of a list in its stable order: the rows after the sort key `after` (exclusive), at most
 * `limit + 1` of them (one more than asked says that a next page exists; lifecycle/pagination.ts).
 */
export type PageQuery = { after?: readonly string[]; limit: number };

export type SessionFilter = {
  runnerId?: string;
  containerName?: string;
  agentRef?: string;
  /** Only sessions of these namespaces' Agents (agent_ref `ns/…`); empty: none. */
  namespaces?: readonly string[];
  states?: readonly SessionState[];
};
export type SessionChange = {
  state: SessionState;
  reason?: string | undefined;
  /** Only from these states (compare-and-set). */
  from?: readonly SessionState[];
};
export type Transition = { session: SessionRecord; previous: SessionState; frame: StoredFrame };

/** A frame with its global id (the cursor of the unfiltered event stream). */
export type StoredFrame = { id: number; frame: Frame };
