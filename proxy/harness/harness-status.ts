import { expiryOf } from "../../contracts/session-expiry.ts";
import type { SessionState } from "../../contracts/compass.ts";
import type { ApiErrorBody } from "../../contracts/errors.ts";
import {
  type Condition,
  type ConditionStatus,
  ConditionTypes,
  HARNESS_SESSION_KIND,
  type HarnessPhase,
  type HarnessReason,
  HarnessReasons,
  type HarnessSession,
  pausedSince,
} from "../../contracts/harness-session.ts";
import { API_VERSION } from "../../contracts/resources.ts";
import { SessionReasons } from "../../contracts/session-reasons.ts";
import type { HarnessRecord } from "../store/harness-store.ts";

/**
 * HarnessSession status as pure functions (no clock, no store): what an agent session's state
 * means for the session's phase and Ready condition, which failures are transient, and the
 * manifest a GET returns.
 */

export type Readiness = { status: ConditionStatus; reason: HarnessReason; message: string };
export type Observed = { phase: HarnessPhase; ready: Readiness };

/**
 * The conditions with Ready set to `ready`. `lastTransitionTime` moves only when the status
 * changes (Kubernetes' convention); reason and message follow the latest observation.
 */
export function withReady(previous: readonly Condition[], ready: Readiness, now: string): Condition[] {
  const old = previous.find((c) => c.type === ConditionTypes.Ready);
  const next: Condition = {
    type: ConditionTypes.Ready,
    status: ready.status,
    reason: ready.reason,
    message: ready.message,
    lastTransitionTime: old && old.status === ready.status ? old.lastTransitionTime : now,
  };
  return [...previous.filter((c) => c.type !== ConditionTypes.Ready), next];
}

/** The conditions with the one of `condition.type` replaced (or added), as given. */
export function withCondition(previous: readonly Condition[], condition: Condition): Condition[] {
  return [...previous.filter((c) => c.type !== condition.type), condition];
}

export function readyOf(conditions: readonly Condition[]): Condition | undefined {
  return conditions.find((c) => c.type === ConditionTypes.Ready);
}

/**
 * What a live or errored agent session says about its HarnessSession. Undefined for a session
 * that is not running (STOPPED, or none): the controller's own record says why.
 */
export function observeSession(
  session: { session_id: string; state: SessionState; reason?: string | undefined } | undefined,
): Observed | undefined {
  if (!session) return undefined;
  const id = session.session_id;
  switch (session.state) {
    case "READY":
      return ready("Ready", "True", HarnessReasons.SessionReady, `agent session ${id} is READY`);
    case "STARTING":
      return ready("Pending", "False", HarnessReasons.Starting, `agent session ${id} is starting`);
    case "DISCONNECTED":
      return ready(
        "Pending",
        "Unknown",
        HarnessReasons.RunnerDisconnected,
        `the runner of agent session ${id} is disconnected; waiting for it to reattach`,
      );
    case "STOPPING":
      return ready("Draining", "False", HarnessReasons.Stopped, `agent session ${id} is stopping`);
    case "ERRORED": {
      const reason = sessionFailureReason(session.reason);
      return ready(
        "Failed",
        "False",
        reason,
        `agent session ${id} ended unexpectedly (${session.reason ?? "unknown"}); write the spec again (e.g. desiredState: running) to recover`,
      );
    }
    case "STOPPED":
      return undefined;
    default: {
      const exhaustive: never = session.state;
      return exhaustive;
    }
  }
}

/** An ERRORED session's reason (runner and engine vocabulary) as a HarnessSession reason. */
export function sessionFailureReason(reason: string | undefined): HarnessReason {
  switch (reason) {
    case SessionReasons.LostByRunner:
    case SessionReasons.ReattachExpired:
      return HarnessReasons.RunnerLost;
    case SessionReasons.StartFailed:
      return HarnessReasons.StartFailed;
    default:
      // The agent process alone ended while its workload kept running.
      if (reason?.startsWith("AgentExited") || reason === "AgentNotReady") return HarnessReasons.AgentExited;
      // ContainerExited, OOMKilled, ContainerRemoved, EngineRestarted, ContainerNotFound, PodDeleted,
      // Evicted: the workload, whose main process is the adapter, went away.
      return HarnessReasons.AdapterExited;
  }
}

/**
 * An agent session READY whose adapter a request cannot reach (the runner's `probe` of the relay
 * path failed): not Ready, until a probe succeeds. "Ready" promises that a request is served.
 */
export function unreachable(sessionId: string, error: ApiErrorBody): Observed {
  return ready(
    "Pending",
    "False",
    HarnessReasons.AdapterUnreachable,
    `agent session ${sessionId} is READY but a request cannot reach its adapter yet (${error.code}: ${error.message}); retrying`,
  );
}

/**
 * Whether an ERRORED agent session is an unexpected exit of the session's own workload or agent
 * (crash, OOM, removed, a pod deleted, the agent process ended) that the controller restarts
 * (restart-policy.ts): the session should run, and is not settled for another reason (a failed
 * provision or start, a CrashLoop already, a deliberate stop). A runner that is lost, or a
 * workspace stopped underneath by a restart of the runner or engine (recoversByItself), are not.
 */
export function restartsAfterExit(
  record: Pick<HarnessRecord, "phase" | "conditions" | "spec" | "deletion_requested_at">,
  session: { state: SessionState; reason?: string | undefined },
): boolean {
  // Paused is alive too (frozen): it should run, so an exit is restarted like a running one's.
  if (record.spec.desiredState === "stopped" || record.deletion_requested_at !== undefined) return false;
  if (session.state !== "ERRORED" || STOPPED_UNDERNEATH.includes(session.reason ?? "")) return false;
  const kind = sessionFailureReason(session.reason);
  if (kind !== HarnessReasons.AdapterExited && kind !== HarnessReasons.AgentExited) return false;
  switch (record.phase) {
    case "Pending":
    case "Ready":
    case "Paused":
      return true;
    case "Failed": {
      const reason = readyOf(record.conditions)?.reason;
      // Failed as the mirror of this exit (e.g. while starting), or a CrashLoop (settled there).
      return (
        reason === HarnessReasons.AdapterExited ||
        reason === HarnessReasons.AgentExited ||
        reason === HarnessReasons.CrashLoop
      );
    }
    case "Draining":
    case "Stopped":
      return false;
    default: {
      const exhaustive: never = record.phase;
      return exhaustive;
    }
  }
}

/** Agent-session reasons that say the workload stopped underneath the session, not of its own doing. */
const STOPPED_UNDERNEATH: readonly string[] = [SessionReasons.WorkspaceNotRunning, "EngineRestarted"];

/**
 * Whether the controller brings a session back up by itself, without a spec write: it should run
 * (desiredState running, not stopping or stopped), and its agent session is ERRORED because its
 * workload stopped while its runner or the engine restarted (`WorkspaceNotRunning`,
 * `EngineRestarted`), not because it crashed, was OOM-killed or removed. A bring-up that failed
 * for good since (Failed with another reason than the one that mirrors this error) settles it
 * until the spec is written again; a transient failure (Pending) is retried.
 */
export function recoversByItself(
  record: Pick<HarnessRecord, "phase" | "conditions" | "spec" | "deletion_requested_at">,
  session: { state: SessionState; reason?: string | undefined },
): boolean {
  if (record.spec.desiredState === "stopped" || record.deletion_requested_at !== undefined) return false;
  if (session.state !== "ERRORED" || !STOPPED_UNDERNEATH.includes(session.reason ?? "")) return false;
  switch (record.phase) {
    case "Pending":
    case "Ready":
    case "Paused":
      return true;
    case "Failed":
      return readyOf(record.conditions)?.reason === HarnessReasons.AdapterExited;
    case "Draining":
    case "Stopped":
      return false;
    default: {
      const exhaustive: never = record.phase;
      return exhaustive;
    }
  }
}

/** A failed provisioning or start: the reason, and whether the controller retries on its own. */
export function failureOf(
  step: "provision" | "start" | "stop",
  error: ApiErrorBody,
): { reason: HarnessReason; transient: boolean } {
  // No runner matches spec.runnerSelector, or every match is draining or full (placement.ts):
  // Pending until runners change.
  if (error.details?.reason === HarnessReasons.Unschedulable)
    return { reason: HarnessReasons.Unschedulable, transient: true };
  // No runner (not connected, link lost) or a stack locked by another operation: it passes.
  if (error.code === "UNAVAILABLE" || error.code === "ABORTED")
    return {
      reason: step === "stop" ? HarnessReasons.StopFailed : HarnessReasons.RunnerUnavailable,
      transient: true,
    };
  if (step === "stop") return { reason: HarnessReasons.StopFailed, transient: true };
  if (/ImagePullFailed|image pull failed/i.test(error.message))
    return { reason: HarnessReasons.ImagePullFailed, transient: false };
  return {
    reason: step === "provision" ? HarnessReasons.ProvisionFailed : HarnessReasons.StartFailed,
    transient: false,
  };
}

/**
 * The Ready condition's message for a failed step. A placement refusal (no runner connected, every
 * one draining or full, none matching) says that no runner can serve the session, why, and what to
 * do (its `details.remedy`, placement.ts): a bare "no runner is connected; retrying" left a user
 * with a server that looked healthy and a session that never moved (issue 34 item 2).
 */
export function failureMessage(
  step: "provision" | "start" | "stop",
  error: ApiErrorBody,
  transient: boolean,
): string {
  const remedy = typeof error.details?.remedy === "string" ? error.details.remedy : undefined;
  const retrying = transient ? "; retrying" : "";
  if (remedy)
    return `no runner can serve this session (${error.code}): ${error.message}; ${remedy}${retrying}`;
  return `${step} failed (${error.code}): ${error.message}${retrying}`;
}

/** The manifest of a record: metadata, the spec as written, and the status. */
export function toManifest(record: HarnessRecord): HarnessSession {
  const status: HarnessSession["status"] = {
    phase: record.phase,
    observedGeneration: record.observed_generation,
    conditions: record.conditions,
    requestCount: record.request_count,
    activeRequests: record.active_requests,
    errorCount: record.error_count,
    usage: {
      inputTokens: record.gateway_input_tokens,
      outputTokens: record.gateway_output_tokens,
      reportedRequests: record.gateway_reported,
      unavailableRequests: record.gateway_unavailable,
      // The provider's own numbers only once the gateway reported any (an Agent without a model
      // never makes a call through it).
      ...(record.gateway_reported + record.gateway_unavailable > 0 ? { source: "gateway" as const } : {}),
    },
    claimedUsage: {
      inputTokens: record.input_tokens,
      outputTokens: record.output_tokens,
      reportedRequests: record.usage_reported,
      unavailableRequests: record.usage_unavailable,
    },
    restartCount: record.restart_count,
  };
  const pausedAt = pausedSince(record.phase, record.conditions);
  if (pausedAt !== undefined) status.pausedAt = pausedAt;
  const expiresAt = expiryOf(record.spec, record.created_at);
  if (expiresAt !== undefined) status.expiresAt = expiresAt;
  if (record.last_exit !== undefined)
    status.lastExit = { reason: record.last_exit.reason, time: record.last_exit.time };
  if (record.resolved_image_digest !== undefined) status.resolvedImageDigest = record.resolved_image_digest;
  if (record.session_id !== undefined) status.sessionId = record.session_id;
  if (record.container_name !== undefined) status.containerName = record.container_name;
  if (record.last_activity_time !== undefined) status.lastActivityTime = record.last_activity_time;
  if (record.last_request_id !== undefined) status.lastRequestId = record.last_request_id;
  if (record.last_request_outcome !== undefined) status.lastRequestOutcome = record.last_request_outcome;
  if (record.last_request_usage !== undefined) status.lastRequestUsage = record.last_request_usage;
  const metadata: HarnessSession["metadata"] = {
    name: record.name,
    namespace: record.namespace,
    uid: record.uid,
    generation: record.generation,
    creationTimestamp: record.created_at,
  };
  if (record.deletion_requested_at !== undefined) metadata.deletionTimestamp = record.deletion_requested_at;
  return { apiVersion: API_VERSION, kind: HARNESS_SESSION_KIND, metadata, spec: record.spec, status };
}

function ready(
  phase: HarnessPhase,
  status: ConditionStatus,
  reason: HarnessReason,
  message: string,
): Observed {
  return { phase, ready: { status, reason, message } };
}
