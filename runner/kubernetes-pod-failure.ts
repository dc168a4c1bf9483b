/**
 * Why a session pod will not become Ready without someone changing something: what the kubelet
 * reports as a container's waiting reason once it has given up trying at once (an image it cannot
 * pull, a container config it cannot build, a container that keeps exiting). The runner waits for
 * the Ready pod itself (no `up` awaits the rollout), so it must tell these apart from a pod that is
 * merely slow, and say which, instead of waiting out its deadline.
 */
import type { V1ContainerStatus, V1Pod } from "@kubernetes/client-node";
import { CodedError } from "../contracts/errors.ts";

/** The kubelet retries these with a back-off: the first failed pull (ErrImagePull) is not one. */
const PULL_FAILED = new Set(["ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"]);
const CONFIG_FAILED = new Set(["CreateContainerConfigError", "CreateContainerError", "RunContainerError"]);

/** The first hopeless state among the session's live pods, as the error provision answers; else undefined. */
export function podFailure(pods: readonly V1Pod[]): CodedError | undefined {
  for (const pod of pods) {
    if (pod.metadata?.deletionTimestamp) continue;
    const statuses = [...(pod.status?.initContainerStatuses ?? []), ...(pod.status?.containerStatuses ?? [])];
    for (const status of statuses) {
      const failure = containerFailure(pod.metadata?.name ?? "?", status);
      if (failure) return failure;
    }
  }
  return undefined;
}

function containerFailure(pod: string, status: V1ContainerStatus): CodedError | undefined {
  const waiting = status.state?.waiting;
  const reason = waiting?.reason;
  if (!reason) return undefined;
  const said = (waiting.message ?? "").slice(0, 300);
  const where = `container ${status.name} of pod ${pod}`;
  // Worded as the Docker engine's pull failure (stacks/errors.ts): status reason ImagePullFailed.
  if (PULL_FAILED.has(reason))
    return new CodedError(
      "FAILED_PRECONDITION",
      `image pull failed: ${status.image} (${where}, ${reason}): ${said}`,
      {
        reason: "ImagePullFailed",
      },
    );
  if (CONFIG_FAILED.has(reason))
    return new CodedError("FAILED_PRECONDITION", `${where} cannot start (${reason}): ${said}`, {
      reason,
    });
  if (reason === "CrashLoopBackOff") {
    const last = status.lastState?.terminated;
    const exit = last
      ? `exit code ${last.exitCode}${last.reason ? ` (${last.reason})` : ""}`
      : "no exit recorded";
    return new CodedError("FAILED_PRECONDITION", `${where} keeps exiting: last ${exit}`, {
      reason: "CrashLoopBackOff",
      restarts: status.restartCount,
    });
  }
  return undefined;
}
