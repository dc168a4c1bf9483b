import type { SessionState } from "../../contracts/compass.ts";
import { SessionReasons } from "../../contracts/session-reasons.ts";

/**
 * What the AgentSession states mean to the server, as pure functions (no clock, no store).
 *
 * "Live" = the session holds its container: at most one live session per container, at most one
 * live container per agent account (SpawnAgent). STOPPED and ERRORED are retained, not live.
 */
export const LIVE_STATES = [
  "STARTING",
  "READY",
  "STOPPING",
  "DISCONNECTED",
] as const satisfies SessionState[];

export function isLive(state: SessionState): boolean {
  return (LIVE_STATES as readonly SessionState[]).includes(state);
}

/** States a runner link loss turns into DISCONNECTED. */
export const ATTACHED_STATES = ["STARTING", "READY", "STOPPING"] as const satisfies SessionState[];

export type Decision =
  | { kind: "keep" }
  | { kind: "set"; state: SessionState; reason?: string | undefined }
  /** The runner runs a session the server has settled (stopped on purpose, or errored): stop it there. */
  | { kind: "stop-on-runner" };

/**
 * What the store does with a state a runner reports (a `session_state` message, or an entry of
 * the authoritative set in `hello`). The runner is authoritative about what runs, with two
 * exceptions: a deliberate stop is never turned into ERRORED, and a settled session (STOPPED,
 * ERRORED) is never revived behind the client's back — recovery is an explicit reload.
 */
export function decideReported(
  current: { state: SessionState; reason?: string | undefined },
  reported: SessionState,
  reason?: string,
): Decision {
  if (reported === "DISCONNECTED") return { kind: "keep" }; // only the server knows the link is lost
  switch (current.state) {
    case "STOPPED":
    case "ERRORED":
      return isLive(reported) ? { kind: "stop-on-runner" } : { kind: "keep" };
    case "STOPPING":
      // A stop is in flight: whatever the agent did on its way out, the outcome is STOPPED, for
      // the reason the server stopped it (Stopped, Reload).
      return reported === "STOPPED" || reported === "ERRORED"
        ? { kind: "set", state: "STOPPED", reason: current.reason ?? SessionReasons.Stopped }
        : { kind: "keep" };
    case "STARTING":
    case "READY":
    case "DISCONNECTED":
      return { kind: "set", state: reported, reason };
    default: {
      const exhaustive: never = current.state;
      return exhaustive;
    }
  }
}

/** A session the store places on a runner that reattached without it in its authoritative set. */
export function decideMissing(current: SessionState): Decision {
  switch (current) {
    case "STARTING":
    case "READY":
    case "DISCONNECTED":
      return { kind: "set", state: "ERRORED", reason: SessionReasons.LostByRunner };
    case "STOPPING":
      return { kind: "set", state: "STOPPED", reason: SessionReasons.Stopped };
    case "STOPPED":
    case "ERRORED":
      return { kind: "keep" };
    default: {
      const exhaustive: never = current;
      return exhaustive;
    }
  }
}
