/**
 * The Kubernetes objects of a snapshot (issue 38, contracts/session-snapshot.ts), built once: its
 * storage, a PVC the snapshot's stack declares (infra/kubernetes/snapshot.ts) and the runner makes
 * at once before that stack records it (runner/kubernetes/snapshots.ts), so the recording `up`
 * finds nothing to change; and the short-lived copy pod the runner fills or reads it with.
 *
 * The copy pod is hardened like a session pod (infra/kubernetes/hardening.ts: Pod Security
 * `restricted`, no service-account token, uid 65532, read-only root, every capability dropped),
 * runs the runner's git image idling until the runner execs its copy, mounts nothing but the PVCs
 * it copies between, and is selected by a NetworkPolicy that allows no traffic either way: it
 * needs no network.
 *
 * Plain objects (no Pulumi SDK: the runner loads this module).
 */
import { LABEL_PREFIX, Labels, type SnapshotStackSpec } from "../../contracts/session-spec.ts";
import { hardenedContainerSecurityContext, hardenedPodSpec } from "./hardening.ts";

/** The label naming the snapshot (its name; `Labels.namespace` its namespace) on its storage and copy pods. */
export const SNAPSHOT_LABEL = `${LABEL_PREFIX}/snapshot`;
/** `Labels.component` of a snapshot's storage. */
export const SNAPSHOT_COMPONENT = "snapshot";
/** `Labels.component` of a copy pod: what the copy NetworkPolicy selects. */
export const SNAPSHOT_COPY_COMPONENT = "snapshot-copy";
/** The NetworkPolicy isolating every copy pod of the sessions namespace, both ways. */
export const SNAPSHOT_COPY_NETWORK_POLICY = "agent-sessions-snapshot-copy";
/** A snapshot PVC's storage request when none is given: the session volume's default (1024 MiB). */
export const DEFAULT_SNAPSHOT_STORAGE_REQUEST = "1Gi";

/** The labels of a snapshot's storage (no `Labels.session`: the pod watch and placement look for that). */
export function snapshotLabels(target: Pick<SnapshotStackSpec["target"], "namespace" | "name">) {
  return {
    [Labels.managedBy]: "agent-sessions",
    [Labels.component]: SNAPSHOT_COMPONENT,
    [Labels.namespace]: target.namespace,
    [SNAPSHOT_LABEL]: target.name,
  };
}

/**
 * The snapshot's PVC: `target.storage` in `target.kubernetes.namespace`, ReadWriteOnce (the copy
 * pod runs on the node of the session's volume), a fresh dynamically provisioned volume (no
 * dataSource: the pack's narrowed-mounts).
 */
export function snapshotPvcManifest(spec: SnapshotStackSpec) {
  const { target } = spec;
  const kubernetes = target.kubernetes;
  return {
    apiVersion: "v1" as const,
    kind: "PersistentVolumeClaim" as const,
    metadata: {
      name: target.storage,
      namespace: kubernetes?.namespace ?? "agent-sessions",
      labels: snapshotLabels(target),
    },
    spec: {
      accessModes: ["ReadWriteOnce"],
      resources: { requests: { storage: spec.storageRequest ?? DEFAULT_SNAPSHOT_STORAGE_REQUEST } },
      ...(kubernetes?.storageClassName ? { storageClassName: kubernetes.storageClassName } : {}),
    },
  };
}

/** Waits for execs and ends at once on SIGTERM (as the session pod's workspace sidecar). */
const IDLE_SCRIPT = 'trap "exit 0" TERM INT; while :; do sleep 3600 & wait $!; done';

/** The container of a copy pod. */
export const COPY_CONTAINER = "copy";

export type CopyMount = { claimName: string; mountPath: string; readOnly: boolean };

/**
 * A copy pod: the git image idling with `mounts` (the PVCs copied between) and nothing else; the
 * runner execs the copy into it and deletes it afterwards, whatever happened.
 */
export function copyPodManifest(options: {
  name: string;
  namespace: string;
  image: string;
  mounts: CopyMount[];
  labels?: Record<string, string>;
}) {
  return {
    apiVersion: "v1" as const,
    kind: "Pod" as const,
    metadata: {
      name: options.name,
      namespace: options.namespace,
      labels: {
        ...options.labels,
        [Labels.managedBy]: "agent-sessions",
        [Labels.component]: SNAPSHOT_COPY_COMPONENT,
      },
    },
    spec: {
      ...hardenedPodSpec(),
      restartPolicy: "Never",
      terminationGracePeriodSeconds: 1,
      containers: [
        {
          name: COPY_CONTAINER,
          image: options.image,
          imagePullPolicy: "IfNotPresent",
          command: ["/bin/sh", "-c", IDLE_SCRIPT],
          workingDir: "/",
          securityContext: hardenedContainerSecurityContext(),
          resources: { requests: { cpu: "10m", memory: "32Mi" }, limits: { cpu: "1", memory: "256Mi" } },
          volumeMounts: options.mounts.map((m, i) => ({
            name: `v${i}`,
            mountPath: m.mountPath,
            readOnly: m.readOnly,
          })),
        },
      ],
      volumes: options.mounts.map((m, i) => ({
        name: `v${i}`,
        persistentVolumeClaim: { claimName: m.claimName, readOnly: m.readOnly },
      })),
    },
  };
}

/** No ingress, no egress, for every copy pod of the namespace: a copy needs no network. */
export function copyNetworkPolicyManifest(namespace: string) {
  return {
    apiVersion: "networking.k8s.io/v1" as const,
    kind: "NetworkPolicy" as const,
    metadata: {
      name: SNAPSHOT_COPY_NETWORK_POLICY,
      namespace,
      labels: { [Labels.managedBy]: "agent-sessions", [Labels.component]: SNAPSHOT_COPY_COMPONENT },
    },
    spec: {
      podSelector: { matchLabels: { [Labels.component]: SNAPSHOT_COPY_COMPONENT } },
      policyTypes: ["Ingress", "Egress"],
      ingress: [],
      egress: [],
    },
  };
}
