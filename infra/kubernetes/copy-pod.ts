/**
 * The short-lived copy pod the runner fills, reads and restores snapshots with
 * (runner/kubernetes/snapshots.ts; issue 38), and the NetworkPolicy that isolates it. The
 * snapshot's PVC itself is infra/kubernetes/snapshot-manifest.ts's.
 *
 * The copy pod is hardened like a session pod (infra/kubernetes/hardening.ts: Pod Security
 * `restricted`, no service-account token, uid 65532, read-only root, every capability dropped),
 * runs the runner's git image idling until the runner execs its copy, mounts nothing but the PVCs
 * it copies between and a small scratch `/tmp` in memory, and is selected by a NetworkPolicy of its own (same name, made before it and
 * deleted with it, so nothing of a copy outlives it) that allows no traffic either way: it needs
 * no network.
 *
 * Plain objects (no Pulumi SDK: the runner loads this module).
 */
import { LABEL_PREFIX, Labels } from "../../contracts/session-spec.ts";
import { hardenedContainerSecurityContext, hardenedPodSpec } from "./hardening.ts";

/** `Labels.component` of a copy pod: what the copy NetworkPolicy selects. */
export const SNAPSHOT_COPY_COMPONENT = "snapshot-copy";
/** The label naming a copy pod on itself: what its own NetworkPolicy selects. */
export const COPY_POD_LABEL = `${LABEL_PREFIX}/copy-pod`;

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
        [COPY_POD_LABEL]: options.name,
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
          volumeMounts: [
            ...options.mounts.map((m, i) => ({
              name: `v${i}`,
              mountPath: m.mountPath,
              readOnly: m.readOnly,
            })),
            { name: "tmp", mountPath: "/tmp" },
          ],
        },
      ],
      volumes: [
        ...options.mounts.map((m, i) => ({
          name: `v${i}`,
          persistentVolumeClaim: { claimName: m.claimName, readOnly: m.readOnly },
        })),
        // A restore's lists of the two trees (runner/engine/volume-sync-script.ts); past it, the full replace.
        { name: "tmp", emptyDir: { medium: "Memory", sizeLimit: "64Mi" } },
      ],
    },
  };
}

/** No ingress, no egress, for the copy pod `name` (the policy's own name): a copy needs no network. */
export function copyNetworkPolicyManifest(name: string, namespace: string) {
  return {
    apiVersion: "networking.k8s.io/v1" as const,
    kind: "NetworkPolicy" as const,
    metadata: {
      name,
      namespace,
      labels: { [Labels.managedBy]: "agent-sessions", [Labels.component]: SNAPSHOT_COPY_COMPONENT },
    },
    spec: {
      podSelector: { matchLabels: { [Labels.component]: SNAPSHOT_COPY_COMPONENT, [COPY_POD_LABEL]: name } },
      policyTypes: ["Ingress", "Egress"],
      ingress: [],
      egress: [],
    },
  };
}
