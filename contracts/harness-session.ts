import { z } from "zod";
import { RequestOutcome, ResultRecord, Usage } from "./adapter.ts";
import { IdleTimeout, parseDuration } from "./duration.ts";
import { API_VERSION, ObjectMeta } from "./resources.ts";
import { RunnerSelector } from "./runners.ts";
import { DnsLabel, type Engine } from "./session-spec.ts";
import { SessionExpiresAt, SessionTtl } from "./session-expiry.ts";
import { SessionPorts } from "./session-ports.ts";
import { SessionSource } from "./session-snapshot.ts";
import { WorkspaceRepo } from "./workspace-repo.ts";

/**
 * HarnessSession: a namespaced, kubectl-style resource at
 * `/v1/namespaces/{ns}/harnesssessions/{name}`. Desired state in `spec`, observed state in
 * `status`.
 *
 * "running" (spec.desiredState) is what the user asks for: the session's workspace provisioned
 * at scale 1 and its agent session started. "Ready" (status.conditions[type=Ready]) is what the
 * controller observed: the agent session is READY and a request can reach its adapter (the
 * runner answered a probe of the relay path), so the proxy accepts requests. A running
 * session can be not Ready (Pending while provisioning, Stopped after an idle timeout, Failed).
 */
export const HARNESS_SESSION_KIND = "HarnessSession";

/**
 * The tier the user asks for: `running`; `paused` (the workload frozen with all its memory while
 * nothing is in flight: any request, agent message or files call wakes it, and it is frozen again
 * once idle; Docker only); `stopped` (workload gone, volume kept).
 */
export const DesiredState = z.enum(["running", "paused", "stopped"]);
export type DesiredState = z.infer<typeof DesiredState>;

export const HarnessSessionSpec = z.strictObject({
  /** An Agent in the session's namespace. Immutable. */
  agentRef: DnsLabel,
  /**
   * The AgentRuntime the Agent is bound to (must be the Agent's `runtimeRef`). Immutable once set.
   * @default the Agent's: filled in at the PUT when the Agent exists; a session applied before its
   * Agent keeps it unset, binds to the Agent's runtime when the Agent appears, and is filled in by
   * its next PUT or PATCH.
   */
  runtimeRef: DnsLabel.optional(),
  desiredState: DesiredState.default("running"),
  /**
   * Stop (scale to 0, volume kept) after this long without activity, from Paused too; `0` never.
   * @default 15m
   */
  idleTimeout: IdleTimeout.default("15m"),
  /**
   * Freeze the workload with all its memory (phase Paused) after this long without activity;
   * anything that reaches the session wakes it in tens of milliseconds. Shorter than idleTimeout
   * when both are set; `0` or absent: never. Refused for a session on a Kubernetes runner, or
   * not placed yet when every connected runner its runnerSelector matches is one (docs/kubernetes.md
   * says why); otherwise such a session is placed only on a Docker runner. @default off
   */
  pauseAfter: IdleTimeout.optional(),
  /**
   * Place the session's workspace only on a runner whose labels include every `key: value` here
   * (`agent-sessions runner --label key=value`). None matching: Pending, reason Unschedulable,
   * retried when runners change. Read when the workspace is placed; a placed one stays put.
   */
  runnerSelector: RunnerSelector.optional(),
  /**
   * A request to the session while it is stopped for IdleTimeout resumes it, waits until it is
   * Ready and is then served (one slower reply instead of FAILED_PRECONDITION). A session stopped
   * by `desiredState: stopped`, Failed or being deleted is never resumed by a request. @default false
   */
  autoResume: z.boolean().default(false),
  /**
   * The session's workspace: `repo` seeds it once, at its first provision, with a checkout of that
   * repository (contracts/workspace-repo.ts); later changes here do not re-seed it.
   */
  workspace: z.strictObject({ repo: WorkspaceRepo.optional() }).optional(),
  /**
   * Where the session's volume comes from (contracts/session-snapshot.ts): `{snapshotRef}` makes
   * the session a fork of that SessionSnapshot (same namespace, Ready, same Agent and runtime).
   * Immutable. Absent: an empty volume.
   */
  source: SessionSource.optional(),
  /**
   * Delete the session this long after its creation (its snapshots are kept; an `Expired` event
   * says why). Above 0, up to 8784h; not with expiresAt (contracts/session-expiry.ts). @default never
   */
  ttl: SessionTtl.optional(),
  /** Delete the session at this RFC 3339 time, at most 366 days ahead; not with ttl. @default never */
  expiresAt: SessionExpiresAt.optional(),
  /**
   * Ports a process in the session listens on, reached only through the proxy at
   * `…/harnesssessions/{name}/ports/{port}/…` with a token that opens them (issue 40;
   * contracts/session-ports.ts): at most 8, 1024-65535, never the adapter's port, no port or name
   * twice. Immutable (the session's network rules are made with them). @default none
   */
  ports: SessionPorts.optional(),
});
export type HarnessSessionSpec = z.infer<typeof HarnessSessionSpec>;

/** Immutable spec fields: a PUT or PATCH changing one is INVALID_ARGUMENT. */
export const IMMUTABLE_SPEC_FIELDS = [
  "agentRef",
  "runtimeRef",
  "source",
  "ports",
] as const satisfies (keyof HarnessSessionSpec)[];

/** What PUT accepts. `status` (e.g. from a GET round trip) is ignored; server-set metadata too. */
export const HarnessSessionInput = z.strictObject({
  apiVersion: z.literal(API_VERSION),
  kind: z.literal(HARNESS_SESSION_KIND),
  metadata: ObjectMeta,
  spec: HarnessSessionSpec,
  status: z.unknown().optional(),
});
export type HarnessSessionInput = z.infer<typeof HarnessSessionInput>;

/** `Paused`: the workload is frozen with all its memory (spec.pauseAfter, desiredState paused). */
export const HarnessPhase = z.enum(["Pending", "Ready", "Draining", "Failed", "Stopped", "Paused"]);
export type HarnessPhase = z.infer<typeof HarnessPhase>;

export const ConditionStatus = z.enum(["True", "False", "Unknown"]);
export type ConditionStatus = z.infer<typeof ConditionStatus>;

export const Condition = z.object({
  type: z.string(),
  status: ConditionStatus,
  /** One of `HarnessReasons`: stable, switch on it. */
  reason: z.string(),
  /** For people; may change wording. */
  message: z.string(),
  lastTransitionTime: z.string(),
});
export type Condition = z.infer<typeof Condition>;

export const ConditionTypes = {
  Ready: "Ready",
  /**
   * True once a request auto-resumed the session (spec.autoResume); `lastTransitionTime` is when
   * the latest auto-resume began, `message` names the request that triggered it.
   */
  AutoResumed: "AutoResumed",
} as const;

/**
 * Stable reasons of the Ready condition. Clients switch on them; never reword one.
 */
export const HarnessReasons = {
  /** Ready=True: the agent session is READY, its adapter is reachable, and requests are accepted. */
  SessionReady: "SessionReady",
  /** The workspace (stack) is being brought up. */
  Provisioning: "Provisioning",
  /** The agent session is starting (a first start). */
  Starting: "Starting",
  /** A stopped session is being brought back (stack up at scale 1, start with resume). */
  Resuming: "Resuming",
  /** A request arrived for a session stopped for IdleTimeout with spec.autoResume: it is being resumed. */
  AutoResuming: "AutoResuming",
  /** The AutoResumed condition: a request arrived while the session was stopped for IdleTimeout. */
  RequestArrived: "RequestArrived",
  /**
   * The workspace stopped underneath the session while its runner or the engine restarted (agent
   * session ERRORED WorkspaceNotRunning or EngineRestarted): desiredState is running, so it is
   * brought back up (stack at scale 1, the agent session resumed; the volume keeps its state).
   */
  Recovering: "Recovering",
  /**
   * The workload or the agent exited unexpectedly (crash, OOM, removed, a pod deleted) while
   * desiredState is running: it is restarted after a back-off (status.restartCount and
   * status.lastExit say how often and why), resuming the conversation kept on the volume.
   */
  Restarting: "Restarting",
  /**
   * The workload or the agent kept exiting: restarted too often in a row (each failed again before
   * it ran long undisturbed). Failed until the spec is written again; status.lastExit says why.
   */
  CrashLoop: "CrashLoop",
  /**
   * The agent session is READY but a request cannot reach its adapter yet (the runner cannot
   * relay to it: no link, no token, adapter not answering ready); retried until it can.
   */
  AdapterUnreachable: "AdapterUnreachable",
  /** Stopped because spec.desiredState is stopped. */
  Stopped: "Stopped",
  /**
   * The workload is frozen with all its memory (spec.pauseAfter without activity, or desiredState
   * paused): phase Paused. A request, an agent message or a files call wakes it.
   */
  Paused: "Paused",
  /**
   * Stopped (volume kept) because the runner's paused sessions were over its memory budget
   * (AGENT_SESSIONS_RUNNER_PAUSED_MEMORY_MAX_BYTES) and this one was the least recently used.
   * Resumes like a session stopped for IdleTimeout.
   */
  Evicted: "Evicted",
  /**
   * `:restore` (issue 38): stopped to have its volume returned to a SessionSnapshot, then brought
   * back to its desired state (resuming the conversation the snapshot holds).
   */
  Restoring: "Restoring",
  /** Being deleted because its spec.ttl or spec.expiresAt was reached (snapshots are kept). */
  Expired: "Expired",
  /**
   * Stopped by the idle controller; resumes when the spec is written again (e.g. desiredState
   * running), or with spec.autoResume on the next request.
   */
  IdleTimeout: "IdleTimeout",
  /** The adapter (the workload's main process) exited, was killed or removed. */
  AdapterExited: "AdapterExited",
  /** The agent process exited while its workload kept running. */
  AgentExited: "AgentExited",
  /** The engine could not pull the runtime's image. */
  ImagePullFailed: "ImagePullFailed",
  /** The binding is invalid (unknown Agent or runtime, a runtime without v1alpha2, …); nothing provisioned. */
  Invalid: "Invalid",
  /** Provisioning the workspace failed for another reason. */
  ProvisionFailed: "ProvisionFailed",
  /** The runner refused or failed to start the agent session. */
  StartFailed: "StartFailed",
  /** No runner matches spec.runnerSelector, or every matching one is draining or full; retried. */
  Unschedulable: "Unschedulable",
  /** No runner can take the work right now; retried. */
  RunnerUnavailable: "RunnerUnavailable",
  /** The session's runner link is lost; its reattach window runs. */
  RunnerDisconnected: "RunnerDisconnected",
  /** The runner came back without the session, or never came back. */
  RunnerLost: "RunnerLost",
  /** Stopping or scaling down failed; retried. */
  StopFailed: "StopFailed",
  /** DELETE is tearing the session down. */
  Deleting: "Deleting",
} as const;
export type HarnessReason = (typeof HarnessReasons)[keyof typeof HarnessReasons];

/**
 * Token usage summed; calls without usage are counted, never taken as zero. In `status.usage` the
 * "requests" are the model calls the runner's gateway relayed (issue 35); in `status.claimedUsage`
 * they are the session's requests, as their adapter claimed.
 */
export const UsageTotals = z.object({
  inputTokens: z.number().int().nonnegative(),
  outputTokens: z.number().int().nonnegative(),
  /** Calls (requests) whose usage was reported (the token sums cover exactly these). */
  reportedRequests: z.number().int().nonnegative(),
  /** Calls (requests) whose usage is "unavailable" (not reported, failed or cancelled). */
  unavailableRequests: z.number().int().nonnegative(),
  /** "gateway" once the gateway's reports were counted: the numbers are the provider's own. */
  source: z.literal("gateway").optional(),
});
export type UsageTotals = z.infer<typeof UsageTotals>;

/** The latest unexpected exit of a session's workload or agent (the engine's or runner's reason). */
export const SessionExit = z.object({
  /** e.g. ContainerExited, OOMKilled, ContainerRemoved, PodDeleted, AgentExited(…) */
  reason: z.string(),
  /** When the controller saw it. */
  time: z.string(),
});
export type SessionExit = z.infer<typeof SessionExit>;

export const HarnessSessionStatus = z.object({
  phase: HarnessPhase,
  observedGeneration: z.number().int().nonnegative(),
  conditions: z.array(Condition),
  resolvedImageDigest: z.string().optional(),
  sessionId: z.string().optional(),
  containerName: z.string().optional(),
  /**
   * The Pulumi stack of the session's workspace, `<namespace>--<workspace name>` (the workspace
   * name is `<agent>-harness-<name>-<8 hex>`), for `pulumi stack ls` and `policy check -s`.
   * Absent until a workspace is provisioned.
   */
  stackName: z.string().optional(),
  lastActivityTime: z.string().optional(),
  requestCount: z.number().int().nonnegative(),
  activeRequests: z.number().int().nonnegative(),
  errorCount: z.number().int().nonnegative(),
  lastRequestId: z.string().optional(),
  lastRequestOutcome: RequestOutcome.optional(),
  /** Usage of the last finished request, exactly as the adapter recorded it. */
  lastRequestUsage: Usage.optional(),
  /** The model calls the runner's gateway counted for this session. */
  usage: UsageTotals,
  /** What the session's adapter claimed, summed over its requests (never `source`). */
  claimedUsage: UsageTotals.omit({ source: true }),
  /** Restarts after unexpected exits since the session was created (spec writes do not count). */
  restartCount: z.number().int().nonnegative(),
  lastExit: SessionExit.optional(),
  /** Since when the session is Paused (phase Paused only). */
  pausedAt: z.string().optional(),
  /** When the session will be deleted (spec.ttl or spec.expiresAt; absent when it has no expiry). */
  expiresAt: z.string().optional(),
});
export type HarnessSessionStatus = z.infer<typeof HarnessSessionStatus>;

export const HarnessSession = z.object({
  apiVersion: z.literal(API_VERSION),
  kind: z.literal(HARNESS_SESSION_KIND),
  metadata: ObjectMeta.extend({
    uid: z.string(),
    generation: z.number().int().positive(),
    creationTimestamp: z.string(),
    deletionTimestamp: z.string().optional(),
  }),
  spec: HarnessSessionSpec,
  status: HarnessSessionStatus,
});
export type HarnessSession = z.infer<typeof HarnessSession>;

/** The id of one relayed request (the adapter's request id). */
export const RequestId = z
  .string()
  .min(1)
  .max(128)
  .regex(/^[A-Za-z0-9._-]+$/, "letters, digits, '.', '_' and '-' only");

/** `POST …/harnesssessions/{name}/requests`. */
export const HarnessRequest = z.strictObject({
  input: z
    .string()
    .min(1)
    .max(64 * 1024),
  /** A streamed reply (SSE); only when the runtime declares `streaming`. */
  stream: z.boolean().default(false),
  /** Client-chosen id (for cancel); generated when absent. Unique per session. */
  id: RequestId.optional(),
});
export type HarnessRequest = z.infer<typeof HarnessRequest>;

/**
 * A non-streamed reply: the adapter's result record (HTTP 200 when it succeeded; a failed or
 * cancelled one comes as an error body with the record in `details.result`). A streamed reply is
 * SSE: `event: delta` ({type, text}), then `event: result` ({type, result}); a relay failure is
 * `event: error` ({code, message}). Its `usage` is the runner's model gateway's count of the
 * request's model calls when the gateway saw them (`source: "gateway"`, with the adapter's claim
 * in `claimed_usage`), else the adapter's claim.
 */
export const HarnessReply = ResultRecord;
export type HarnessReply = z.infer<typeof HarnessReply>;

/**
 * What the spec schema alone cannot say: pauseAfter shorter than idleTimeout when both are on (a
 * session is paused before it is stopped). The field violations; none when the spec is fine. Pure.
 */
export function pauseAfterViolations(
  spec: Pick<HarnessSessionSpec, "pauseAfter" | "idleTimeout">,
): { field: string; description: string }[] {
  if (spec.pauseAfter === undefined) return [];
  const pause = parseDuration(spec.pauseAfter) ?? 0;
  const idle = parseDuration(spec.idleTimeout) ?? 0;
  if (pause === 0 || idle === 0 || pause < idle) return [];
  return [
    {
      field: "spec.pauseAfter",
      description: `must be shorter than spec.idleTimeout (${spec.idleTimeout}) when both are set; is ${spec.pauseAfter}`,
    },
  ];
}

/**
 * The engines whose runners can freeze a workload (the paused tier): Docker's pause. Kubernetes
 * has none an unprivileged runner may use (docs/kubernetes.md#no-paused-tier).
 */
export const PAUSABLE_ENGINES = ["docker"] as const satisfies readonly Engine[];

/** Where a session in the paused tier may be placed (the server's placement takes it as is). */
export const PAUSED_TIER_PLACEMENT = {
  allowed: PAUSABLE_ENGINES,
  why: "the session asks for the paused tier (spec.desiredState paused or spec.pauseAfter), which only a Docker runner can freeze",
} as const;

/** Whether the spec asks for the paused tier: `desiredState: paused`, or a `pauseAfter` that is on. */
export function wantsPausedTier(spec: Pick<HarnessSessionSpec, "desiredState" | "pauseAfter">): boolean {
  return (
    spec.desiredState === "paused" ||
    (spec.pauseAfter !== undefined && (parseDuration(spec.pauseAfter) ?? 0) > 0)
  );
}

/** When a session in the paused tier was paused: the Ready condition's transition to Paused. */
export function pausedSince(phase: HarnessPhase, conditions: readonly Condition[]): string | undefined {
  if (phase !== "Paused") return undefined;
  const ready = conditions.find((c) => c.type === ConditionTypes.Ready);
  return ready?.reason === HarnessReasons.Paused ? ready.lastTransitionTime : undefined;
}
