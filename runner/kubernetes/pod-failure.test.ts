import type { V1ContainerStatus, V1Pod } from "@kubernetes/client-node";
import { describe, expect, it } from "vitest";
import { PodFailures, RETRIED_GRACE_MS } from "./pod-failure.ts";

const IMAGE = "127.0.0.1:5000/agent-sessions/reference@sha256:" + "a".repeat(64);

function pod(status: Partial<V1ContainerStatus>, deleting = false, uid = "u-1"): V1Pod {
  return {
    metadata: { name: "as-x-1", uid, ...(deleting ? { deletionTimestamp: new Date() } : {}) },
    status: {
      phase: "Pending",
      containerStatuses: [
        { name: "adapter", image: IMAGE, imageID: "", ready: false, restartCount: 0, ...status },
      ],
    },
  };
}

const crashing = pod({
  restartCount: 3,
  state: { waiting: { reason: "CrashLoopBackOff" } },
  lastState: { terminated: { exitCode: 3, reason: "Error" } },
});
const secretLag = pod({
  state: {
    waiting: {
      reason: "CreateContainerConfigError",
      message: "failed to sync secret cache: timed out waiting for the condition",
    },
  },
});

describe("why a session pod will not become Ready by itself", () => {
  it("an image the kubelet backs off pulling fails at once, worded as on Docker", () => {
    const error = new PodFailures().check([
      pod({ state: { waiting: { reason: "ImagePullBackOff", message: "Back-off pulling" } } }),
    ]);
    expect(error?.code).toBe("FAILED_PRECONDITION");
    expect(error?.details).toEqual({ reason: "ImagePullFailed" });
    expect(error?.message).toBe(
      `image pull failed: ${IMAGE} (container adapter of pod as-x-1, ImagePullBackOff): Back-off pulling`,
    );
  });

  it("a config the kubelet cannot build, or a container that keeps exiting, fails once it outlasts the kubelet's retries", () => {
    const failures = new PodFailures();
    const t0 = 1_000_000;
    // The node's Secret cache lagging a new pod passes by itself: not a failure at first sight.
    expect(failures.check([secretLag], t0)).toBeUndefined();
    expect(failures.check([secretLag], t0 + RETRIED_GRACE_MS - 1)).toBeUndefined();
    const config = failures.check([secretLag], t0 + RETRIED_GRACE_MS);
    expect(config?.code).toBe("FAILED_PRECONDITION");
    expect(config?.details).toEqual({ reason: "CreateContainerConfigError" });
    expect(config?.message).toContain("failed to sync secret cache");

    expect(failures.check([crashing], t0 + 40_000)).toBeUndefined();
    const crash = failures.check([crashing], t0 + 40_000 + RETRIED_GRACE_MS);
    expect(crash?.message).toBe("container adapter of pod as-x-1 keeps exiting: last exit code 3 (Error)");
    expect(crash?.details).toEqual({ reason: "CrashLoopBackOff", restarts: 3 });
  });

  it("the grace counts per pod: a replacement pod starts its own", () => {
    const failures = new PodFailures(10);
    expect(failures.check([secretLag], 0)).toBeUndefined();
    const replacement = { ...secretLag, metadata: { ...secretLag.metadata, uid: "u-2" } };
    expect(failures.check([replacement], 10)).toBeUndefined();
    expect(failures.check([replacement], 20)?.details).toEqual({ reason: "CreateContainerConfigError" });
  });

  it("a pod that is only slow, a first failed pull the kubelet retries, or a pod being deleted: no failure", () => {
    const failures = new PodFailures(0);
    expect(failures.check([pod({ state: { waiting: { reason: "ContainerCreating" } } })])).toBeUndefined();
    expect(failures.check([pod({ state: { waiting: { reason: "ErrImagePull" } } })])).toBeUndefined();
    expect(failures.check([pod({ state: { running: {} } })])).toBeUndefined();
    expect(
      failures.check([pod({ state: { waiting: { reason: "CrashLoopBackOff" } } }, true)]),
    ).toBeUndefined();
    expect(failures.check([])).toBeUndefined();
  });
});
