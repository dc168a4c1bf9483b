/**
 * The PVC of a snapshot's storage on Kubernetes (contracts/session-snapshot.ts), the ONE builder of
 * it: the snapshot stack (infra/kubernetes/snapshot.ts) declares it and the runner's copy
 * (runner/kubernetes/snapshots.ts) applies the same object at once; the provider's server-side
 * apply then adopts it. A fresh, dynamically provisioned claim like a session's (never bound to a
 * named volume or cloned: the policy pack refuses both), in the sessions namespace.
 */
import { snapshotLabels } from "../../contracts/session-snapshot.ts";
import type { SnapshotStackSpec } from "../../contracts/session-spec.ts";

/** The storage request when the stack's spec names none: the session volume's default (1 GiB). */
export const DEFAULT_SNAPSHOT_STORAGE_REQUEST = "1024Mi";

export function snapshotPvcManifest(spec: SnapshotStackSpec) {
  const { target } = spec;
  return {
    apiVersion: "v1" as const,
    kind: "PersistentVolumeClaim" as const,
    metadata: {
      name: target.storage,
      namespace: target.kubernetes?.namespace ?? "agent-sessions",
      labels: snapshotLabels(target),
    },
    spec: {
      accessModes: ["ReadWriteOnce"],
      resources: { requests: { storage: spec.storageRequest ?? DEFAULT_SNAPSHOT_STORAGE_REQUEST } },
      ...(target.kubernetes?.storageClassName
        ? { storageClassName: target.kubernetes.storageClassName }
        : {}),
    },
  };
}
