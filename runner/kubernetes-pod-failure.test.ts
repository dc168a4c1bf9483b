import type { V1ContainerStatus, V1Pod } from "@kubernetes/client-node";
import { describe, expect, it } from "vitest";
import { podFailure } from "./kubernetes-pod-failure.ts";

const IMAGE = "127.0.0.1:5000/agent-sessions/reference@sha256:" + "a".repeat(64);

function pod(status: Partial<V1ContainerStatus>, deleting = false): V1Pod {
  return {
    metadata: { name: "as-x-1", ...(deleting ? { deletionTimestamp: new Date() } : {}) },
    status: {
      phase: "Pending",
      containerStatuses: [
        { name: "adapter", image: IMAGE, imageID: "", ready: false, restartCount: 0, ...status },
      ],
    },
  };
}

describe("why a session pod will not become Ready by itself", () => {
  it("an image the kubelet backs off pulling is an image pull failure, worded as on Docker", () => {
    const error = podFailure([
      pod({ state: { waiting: { reason: "ImagePullBackOff", message: "Back-off pulling" } } }),
    ]);
    expect(error?.code).toBe("FAILED_PRECONDITION");
    expect(error?.details).toEqual({ reason: "ImagePullFailed" });
    expect(error?.message).toBe(
      `image pull failed: ${IMAGE} (container adapter of pod as-x-1, ImagePullBackOff): Back-off pulling`,
    );
  });

  it("a container that keeps exiting says its last exit; a config it cannot build says so", () => {
    const crash = podFailure([
      pod({
        restartCount: 3,
        state: { waiting: { reason: "CrashLoopBackOff" } },
        lastState: { terminated: { exitCode: 3, reason: "Error" } },
      }),
    ]);
    expect(crash?.message).toBe("container adapter of pod as-x-1 keeps exiting: last exit code 3 (Error)");
    expect(crash?.details).toEqual({ reason: "CrashLoopBackOff", restarts: 3 });
    const config = podFailure([
      pod({ state: { waiting: { reason: "CreateContainerConfigError", message: 'secret "s" not found' } } }),
    ]);
    expect(config?.details).toEqual({ reason: "CreateContainerConfigError" });
    expect(config?.message).toContain('secret "s" not found');
  });

  it("a pod that is only slow, a first failed pull the kubelet retries, or a pod being deleted: no failure", () => {
    expect(podFailure([pod({ state: { waiting: { reason: "ContainerCreating" } } })])).toBeUndefined();
    expect(podFailure([pod({ state: { waiting: { reason: "ErrImagePull" } } })])).toBeUndefined();
    expect(podFailure([pod({ state: { running: {} } })])).toBeUndefined();
    expect(podFailure([pod({ state: { waiting: { reason: "CrashLoopBackOff" } } }, true)])).toBeUndefined();
    expect(podFailure([])).toBeUndefined();
  });
});
