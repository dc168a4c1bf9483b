/**
 * The hardening every control-plane pod gets, the same as the session pods'
 * (infra/kubernetes/session.ts): non-root uid 65532 (the image's `agent-sessions` user), seccomp
 * RuntimeDefault, a read-only root file system, no privilege escalation, every capability
 * dropped, resource limits. Writable places are volumes: the data volume and a small
 * in-memory /tmp.
 */
import type * as k8s from "@pulumi/kubernetes";
import type { PodResources } from "./config.ts";

export const CONTROL_PLANE_UID = 65532;

export const podSecurityContext: k8s.types.input.core.v1.PodSecurityContext = {
  runAsNonRoot: true,
  runAsUser: CONTROL_PLANE_UID,
  runAsGroup: CONTROL_PLANE_UID,
  // Volumes (the data PVC) become writable by the pod's group.
  fsGroup: CONTROL_PLANE_UID,
  seccompProfile: { type: "RuntimeDefault" },
};

export const containerSecurityContext: k8s.types.input.core.v1.SecurityContext = {
  allowPrivilegeEscalation: false,
  privileged: false,
  readOnlyRootFilesystem: true,
  runAsNonRoot: true,
  capabilities: { drop: ["ALL"] },
  seccompProfile: { type: "RuntimeDefault" },
};

/** Memory requested = limited (no overcommit of memory); CPU requested small, limited higher. */
export function resourcesOf(r: PodResources): k8s.types.input.core.v1.ResourceRequirements {
  const memory = `${r.memoryMiB}Mi`;
  return { requests: { cpu: r.cpuRequest, memory }, limits: { cpu: r.cpu, memory } };
}

/**
 * A bounded /tmp (Node, the Pulumi CLI and its plugins write temporary files). In memory it counts
 * against the pod's memory limit, so only small ones live there.
 */
export function tmpVolume(sizeLimit: string, inMemory: boolean): k8s.types.input.core.v1.Volume {
  return { name: "tmp", emptyDir: { sizeLimit, ...(inMemory ? { medium: "Memory" } : {}) } };
}
