import type Docker from "dockerode";
import { CONTAINER_LOG_CONFIG } from "../../infra/docker/provider/log-limits.ts";

const MiB = 1024 * 1024;

/**
 * The HostConfig of a container the runner starts for one job and removes after (an AgentRun's
 * one-shot, a workspace's git seed or diff): read-only root, no privileges, every capability
 * dropped, no new privileges, bounded memory, CPU and PIDs, never restarted, logs bounded. Only
 * the network and the mounts differ; `/tmp` is always a tmpfs of `tmpMiB`.
 */
export function shortLivedHostConfig(o: {
  network: string;
  mounts: Docker.MountSettings[];
  tmpMiB: number;
  memoryMiB: number;
  pids: number;
}): Docker.HostConfig {
  return {
    ReadonlyRootfs: true,
    Privileged: false,
    CapDrop: ["ALL"],
    SecurityOpt: ["no-new-privileges"],
    NetworkMode: o.network,
    Mounts: [
      ...o.mounts,
      {
        Type: "tmpfs",
        Source: "",
        Target: "/tmp",
        TmpfsOptions: { SizeBytes: o.tmpMiB * MiB, Mode: 0o1777 },
      },
    ],
    Memory: o.memoryMiB * MiB,
    NanoCpus: 1e9,
    PidsLimit: o.pids,
    RestartPolicy: { Name: "no" },
    LogConfig: { Type: CONTAINER_LOG_CONFIG.Type, Config: { ...CONTAINER_LOG_CONFIG.Config } },
  };
}
