/**
 * Why a session pod will not become Ready without someone changing something: what the kubelet
 * reports as a container's waiting reason once it has given up trying at once (an image it cannot
 * pull), or a reason it keeps reporting while it retries (a container config it cannot build, a
 * container that keeps exiting). The runner waits for the Ready pod itself (no `up` awaits the
 * rollout), so it must tell these apart from a pod that is merely slow, and say which, instead of
 * waiting out its deadline.
 */
import type { V1ContainerStatus, V1Pod } from "@kubernetes/client-node";
import { CodedError } from "../../contracts/errors.ts";

/** The kubelet retries these with a back-off: the first failed pull (ErrImagePull) is not one. */
const PULL_FAILED = new Set(["ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"]);
/**
 * The kubelet retries these, and some pass by themselves: on a new pod the node's Secret cache can
 * lag the pod ("failed to sync secret cache: timed out waiting for the condition", seen on the
 * 1.20 test bed at a resume), and a container may exit once on a slow start. Hopeless only when
 * the same pod still reports it after {@link RETRIED_GRACE_MS}.
 */
const CONFIG_FAILED = new Set(["CreateContainerConfigError", "CreateContainerError", "RunContainerError"]);
export const RETRIED_GRACE_MS = 30_000;

/**
 * Watches one wait for a Ready pod: remembers when each retried reason was first seen on a pod, so
 * a reason the kubelet gets past is not a failure and one it keeps reporting is.
 */
export class PodFailures {
  readonly #firstSeen = new Map<string, number>();
  readonly #graceMs: number;

  constructor(graceMs = RETRIED_GRACE_MS) {
    this.#graceMs = graceMs;
  }

  /** The first hopeless state among the session's live pods, as the error provision answers; else undefined. */
  check(pods: readonly V1Pod[], now = Date.now()): CodedError | undefined {
    for (const pod of pods) {
      if (pod.metadata?.deletionTimestamp) continue;
      const name = pod.metadata?.name ?? "?";
      const statuses = [
        ...(pod.status?.initContainerStatuses ?? []),
        ...(pod.status?.containerStatuses ?? []),
      ];
      for (const status of statuses) {
        const failure = containerFailure(name, status);
        if (!failure) continue;
        if (!failure.retried) return failure.error;
        const key = `${pod.metadata?.uid ?? name}/${status.name}/${failure.error.details?.reason}`;
        const first = this.#firstSeen.get(key) ?? now;
        this.#firstSeen.set(key, first);
        if (now - first >= this.#graceMs) return failure.error;
      }
    }
    return undefined;
  }
}

function containerFailure(
  pod: string,
  status: V1ContainerStatus,
): { error: CodedError; retried: boolean } | undefined {
  const waiting = status.state?.waiting;
  const reason = waiting?.reason;
  if (!reason) return undefined;
  const said = (waiting.message ?? "").slice(0, 300);
  const where = `container ${status.name} of pod ${pod}`;
  // Worded as the Docker engine's pull failure (stacks/errors.ts): status reason ImagePullFailed.
  if (PULL_FAILED.has(reason))
    return {
      error: new CodedError(
        "FAILED_PRECONDITION",
        `image pull failed: ${status.image} (${where}, ${reason}): ${said}`,
        { reason: "ImagePullFailed" },
      ),
      retried: false,
    };
  if (CONFIG_FAILED.has(reason))
    return {
      error: new CodedError("FAILED_PRECONDITION", `${where} cannot start (${reason}): ${said}`, { reason }),
      retried: true,
    };
  if (reason === "CrashLoopBackOff") {
    const last = status.lastState?.terminated;
    const exit = last
      ? `exit code ${last.exitCode}${last.reason ? ` (${last.reason})` : ""}`
      : "no exit recorded";
    return {
      error: new CodedError("FAILED_PRECONDITION", `${where} keeps exiting: last ${exit}`, {
        reason: "CrashLoopBackOff",
        restarts: status.restartCount,
      }),
      retried: true,
    };
  }
  return undefined;
}
