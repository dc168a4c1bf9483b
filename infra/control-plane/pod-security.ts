/**
 * What the control-plane pods get besides the hardening every pod of the project shares
 * (infra/kubernetes/hardening.ts, the session pods' too): resource limits, and a bounded /tmp, the
 * one writable place besides the data volume on a read-only root file system.
 */
import type * as k8s from "@pulumi/kubernetes";
import type { PodResources } from "./config.ts";

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
