import { type Condition, ConditionTypes, HarnessReasons } from "../../contracts/harness-session.ts";
import { readyOf } from "./harness-status.ts";
import type { HarnessRecord } from "../store/harness-store.ts";

/**
 * What a request to a session that is not Ready does when auto-resume is considered:
 * - `resume`: the session has `spec.autoResume`, is desired running and was stopped for
 *   IdleTimeout (phase Stopped, or Draining while that idle stop runs): resume it, then serve.
 * - `join`: it is already on its way up (phase Pending: provisioning, starting, resuming, waiting
 *   for a runner): wait for Ready, then serve.
 * - `ready`: it is Ready: serve at once.
 * - `wake`: it is Paused (the paused tier): thaw it and serve, with or without spec.autoResume
 *   (a paused session is still up; waking it is not a resume). A session stopped for Evicted
 *   resumes like one stopped for IdleTimeout.
 * - `refuse`: no autoResume, being deleted, stopped by the user (`desiredState: stopped`: the
 *   user's word wins), Failed (needs a spec write), or draining for another reason: the request
 *   is answered FAILED_PRECONDITION as before. Pure.
 */
export type AutoResumeAction = "resume" | "join" | "ready" | "wake" | "refuse";

export type AutoResumeStart = { action: AutoResumeAction; record: HarnessRecord | undefined };

export function autoResumePlan(
  record: Pick<HarnessRecord, "spec" | "phase" | "conditions" | "deletion_requested_at">,
): AutoResumeAction {
  if (record.deletion_requested_at !== undefined || record.spec.desiredState === "stopped") return "refuse";
  if (record.phase === "Paused") return "wake";
  // Woken (or Ready again) by the time it is looked at: serve it, autoResume or not.
  if (record.phase === "Ready") return "ready";
  if (record.spec.autoResume !== true) return "refuse";
  const reason = readyOf(record.conditions)?.reason;
  switch (record.phase) {
    case "Pending":
      return "join";
    case "Stopped":
    case "Draining":
      return reason === HarnessReasons.IdleTimeout || reason === HarnessReasons.Evicted ? "resume" : "refuse";
    case "Failed":
      return "refuse";
    default: {
      const exhaustive: never = record.phase;
      return exhaustive;
    }
  }
}

/** The AutoResumed condition of an auto-resume that begins `now`, triggered by `requestId`. */
export function autoResumedCondition(requestId: string, now: string): Condition {
  return {
    type: ConditionTypes.AutoResumed,
    status: "True",
    reason: HarnessReasons.RequestArrived,
    message: `request ${requestId} arrived while the session was stopped for IdleTimeout; resumed (spec.autoResume)`,
    lastTransitionTime: now,
  };
}
