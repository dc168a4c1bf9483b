import {
  type SessionSnapshot,
  type SnapshotStorage,
  snapshotStorageName,
} from "../../contracts/session-snapshot.ts";
import type { SessionSpec } from "../../contracts/session-spec.ts";

/**
 * What a runner is told of a snapshot's storage (contracts/session-spec.ts SnapshotStorage): its
 * name on the engine, its owner, and, for a Kubernetes PVC, the sessions namespace and storage
 * class of `spec` (the session it is taken of or seeds); without a spec the runner's own default.
 */
export function snapshotTarget(
  snapshot: Pick<SessionSnapshot, "metadata" | "status">,
  spec?: Pick<SessionSpec, "kubernetes">,
): SnapshotStorage {
  const { namespace, name } = snapshot.metadata;
  return storageOf(namespace, name, snapshot.status.storage, spec);
}

/** The storage of snapshot `namespace/name` (its recorded name, else the one it would be given). */
export function storageOf(
  namespace: string,
  name: string,
  storage: string | undefined,
  spec?: Pick<SessionSpec, "kubernetes">,
): SnapshotStorage {
  const kubernetes = spec?.kubernetes;
  return {
    storage: storage ?? snapshotStorageName(namespace, name),
    namespace,
    name,
    ...(kubernetes
      ? {
          kubernetes: {
            namespace: kubernetes.namespace,
            ...(kubernetes.storageClassName ? { storageClassName: kubernetes.storageClassName } : {}),
          },
        }
      : {}),
  };
}
