import type { RequestOutcome, Usage } from "../../contracts/adapter.ts";
import type { Condition, HarnessPhase, HarnessSessionSpec } from "../../contracts/harness-session.ts";
import type { PageQuery } from "./store.ts";

/**
 * Persistent state of HarnessSessions and their relayed requests. Like `Store`, every method is
 * async and atomic on its own so PostgreSQL can replace SQLite. Counters only ever change by
 * single `SET x = x + n` statements (no read-modify-write), so parallel requests on several
 * server replicas never lose an increment; spec writes are optimistic (`expectedGeneration`).
 */
export interface HarnessStore {
  close(): Promise<void>;

  /** Throws `StoreConflictError` when the session exists. */
  createHarnessSession(session: NewHarnessSession): Promise<HarnessRecord>;
  /** Replace the spec and bump the generation; undefined when the generation moved on (retry). */
  replaceHarnessSpec(
    namespace: string,
    name: string,
    spec: HarnessSessionSpec,
    expectedGeneration: number,
  ): Promise<HarnessRecord | undefined>;
  getHarnessSession(namespace: string, name: string): Promise<HarnessRecord | undefined>;
  /**
   * What admitting a request needs of a session, read narrowly (the relay's path reads it once a
   * request; a session that is not Ready is read whole after it).
   */
  getServing(namespace: string, name: string): Promise<HarnessServing | undefined>;
  /** One namespace, or every session (the controllers' resync). */
  /** One namespace's by name, or all by namespace, name; `page` as in Store.listResources. */
  listHarnessSessions(namespace?: string, page?: PageQuery): Promise<HarnessRecord[]>;
  /**
   * What the idle sweep looks at: the sessions Ready or Paused, not desired stopped, not being
   * deleted, with nothing in flight and a last activity at or before the cutoff of their
   * `idleTimeout` (`cutoffFor` of it; undefined = never idle) or none at all; and the Ready ones
   * likewise past their `pauseAfter`, or desired paused. A superset of the idle ones (`idleAction`
   * decides), found through an index and read without their conditions, so a sweep costs the
   * idle sessions, not all of them.
   */
  listIdleCandidates(cutoffFor: (idleTimeout: string) => string | undefined): Promise<IdleCandidate[]>;
  /**
   * What the expiry sweep looks at (contracts/session-expiry.ts): the sessions not being deleted
   * whose spec sets `ttl` or `expiresAt`, read without their status.
   */
  listExpiryCandidates(): Promise<ExpiryCandidate[]>;
  /** Sessions not being deleted that are Pending, Draining or have an unobserved spec (resync). */
  listUnsettledHarnessSessions(): Promise<HarnessRecord[]>;
  /** How many sessions are in each phase (metrics), counted without reading them. */
  countHarnessSessionsByPhase(): Promise<Map<HarnessPhase, number>>;
  findHarnessSessionBySessionId(sessionId: string): Promise<HarnessRecord | undefined>;
  /** Set `deletion_requested_at` (kept when already set); refuses requests from then on. */
  markHarnessDeleting(namespace: string, name: string, now: string): Promise<HarnessRecord | undefined>;
  /** Forget the session and its request records. */
  deleteHarnessSession(namespace: string, name: string): Promise<boolean>;

  /** The controller's columns only; counters are never touched here. */
  setObserved(namespace: string, name: string, patch: ObservedPatch): Promise<HarnessRecord | undefined>;
  /**
   * Compare-and-set Ready (or Paused) → Draining, so no request is admitted from then on; with
   * `to: "Paused"`, Ready → Paused (the paused tier). With `idle`, only when nothing is in flight
   * and the last activity is at or before `idle.cutoff`.
   */
  beginDraining(
    namespace: string,
    name: string,
    change: { conditions: Condition[]; idle?: { cutoff: string }; to?: "Draining" | "Paused" },
  ): Promise<boolean>;

  /**
   * Admit one request: only a Ready session not being deleted; counts it (requestCount,
   * activeRequests, lastActivityTime) and records it in one transaction.
   */
  beginRequest(request: NewHarnessRequest): Promise<BeginResult>;
  /** Settle an admitted request once; false when it was settled already (e.g. reaped). */
  finishRequest(finish: RequestFinish): Promise<boolean>;
  /**
   * Count one model call the runner's gateway reported for a workspace (one statement): into the
   * HarnessSession running on it; undefined when none does.
   */
  addGatewayUsage(
    containerName: string,
    usage: Usage,
  ): Promise<{ namespace: string; name: string } | undefined>;
  getRequest(namespace: string, name: string, requestId: string): Promise<HarnessRequestRecord | undefined>;
  /** Record that the client asked to cancel; undefined when no such request is in flight. */
  markCancelRequested(
    namespace: string,
    name: string,
    requestId: string,
    now: string,
  ): Promise<HarnessRequestRecord | undefined>;
  /**
   * Settle requests in flight since before `cutoff` as failed (a crashed relay must not hold
   * `activeRequests` up, and with it the idle timeout, forever). The number settled.
   */
  reapStaleRequests(cutoff: string, now: string): Promise<number>;
}

/** A HarnessSession as admitting a request needs it (HarnessStore.getServing). */
export type HarnessServing = Pick<
  HarnessRecord,
  "namespace" | "name" | "phase" | "container_name" | "session_id"
>;

export type HarnessRecord = {
  namespace: string;
  name: string;
  uid: string;
  spec: HarnessSessionSpec;
  /** Bumped by every spec write (PUT, PATCH): a write is an explicit ask to reconcile. */
  generation: number;
  created_at: string;
  updated_at: string;
  deletion_requested_at: string | undefined;
  // Observed by the controller.
  observed_generation: number;
  phase: HarnessPhase;
  conditions: Condition[];
  container_name: string | undefined;
  session_id: string | undefined;
  resolved_image_digest: string | undefined;
  // Request accounting (single-statement increments).
  last_activity_time: string | undefined;
  request_count: number;
  active_requests: number;
  error_count: number;
  last_request_id: string | undefined;
  last_request_outcome: RequestOutcome | undefined;
  last_request_usage: Usage | undefined;
  input_tokens: number;
  output_tokens: number;
  usage_reported: number;
  usage_unavailable: number;
  // The model calls the runner's gateway reported for the session's workspace (issue 35).
  gateway_input_tokens: number;
  gateway_output_tokens: number;
  gateway_reported: number;
  gateway_unavailable: number;
  // Restarts after unexpected exits (restart-policy.ts).
  restart_count: number;
  /** Restarts in a row, for the back-off and CrashLoop. */
  consecutive_restarts: number;
  /** When the latest restart is (or was) due. */
  restart_at: string | undefined;
  /** The latest exit handled, with the agent session and frame seq that identify it. */
  last_exit: HandledExit | undefined;
};

/** An unexpected exit the controller handled: one per ERRORED status frame. */
export type HandledExit = { reason: string; time: string; session_id: string; seq: number };

export type IdleCandidate = Pick<
  HarnessRecord,
  "namespace" | "name" | "phase" | "spec" | "active_requests" | "last_activity_time" | "deletion_requested_at"
>;

export type ExpiryCandidate = Pick<HarnessRecord, "namespace" | "name" | "spec" | "created_at">;

export type NewHarnessSession = Pick<HarnessRecord, "namespace" | "name" | "uid" | "spec"> & {
  conditions: Condition[];
};

export type ObservedPatch = Partial<
  Pick<
    HarnessRecord,
    | "observed_generation"
    | "phase"
    | "conditions"
    | "container_name"
    | "session_id"
    | "resolved_image_digest"
    | "last_activity_time"
    | "restart_count"
    | "consecutive_restarts"
    | "restart_at"
    | "last_exit"
  >
>;

export type HarnessRequestRecord = {
  namespace: string;
  name: string;
  request_id: string;
  relay_id: string;
  runner_id: string;
  container_name: string;
  started_at: string;
  finished_at: string | undefined;
  outcome: RequestOutcome | undefined;
  cancel_requested_at: string | undefined;
};

export type NewHarnessRequest = Pick<
  HarnessRequestRecord,
  "namespace" | "name" | "request_id" | "relay_id" | "runner_id" | "container_name"
> & { now: string };

/**
 * Admitted: nothing more is read back (the relay already holds the session it checked; a row
 * read and parsed per request was a measurable share of the server's CPU).
 */
export type BeginResult =
  | { ok: true }
  | { ok: false; reason: "not-found" }
  | { ok: false; reason: "not-ready"; session: HarnessRecord }
  | { ok: false; reason: "duplicate" };

export type RequestFinish = {
  namespace: string;
  name: string;
  request_id: string;
  outcome: RequestOutcome;
  usage: Usage;
  now: string;
};
