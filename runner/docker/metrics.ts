/**
 * A session workload's metrics on Docker (contracts/session-metrics.ts), from the engine: the
 * container's stats (CPU over the engine's own two samples about a second apart, memory as `docker
 * stats` shows it, network counters), its limits from inspect, and the volume's bytes in use by a
 * `du` exec in the workload as its user (skipped while it is frozen: Docker refuses an exec then).
 */
import type Docker from "dockerode";
import { CodedError } from "../../contracts/errors.ts";
import { coresBetween, type SessionMetrics } from "../../contracts/session-metrics.ts";
import { WORKSPACE_ROOT } from "../../contracts/workspace-files.ts";
import { execOutput } from "./exec.ts";

type DockerStats = {
  read?: string;
  preread?: string;
  cpu_stats?: { cpu_usage?: { total_usage?: number }; system_cpu_usage?: number; online_cpus?: number };
  precpu_stats?: { cpu_usage?: { total_usage?: number }; system_cpu_usage?: number; online_cpus?: number };
  memory_stats?: { usage?: number; stats?: Record<string, number | undefined> };
  networks?: Record<string, { rx_bytes?: number; tx_bytes?: number }>;
};

export async function dockerSessionMetrics(
  docker: Docker,
  containerName: string,
  signal?: AbortSignal,
): Promise<SessionMetrics> {
  const container = docker.getContainer(containerName);
  const info = await container.inspect().catch((error: { statusCode?: number }) => {
    if (error.statusCode === 404) return undefined;
    throw error;
  });
  if (!info?.State.Running)
    throw new CodedError(
      "FAILED_PRECONDITION",
      `workspace ${containerName} has no running container (the session is stopped): nothing to measure`,
    );
  // Without one-shot the engine takes a second sample (about a second later) for the CPU figures.
  const [stats, usedBytes] = await Promise.all([
    container.stats({ stream: false }) as Promise<DockerStats>,
    info.State.Paused ? Promise.resolve(undefined) : volumeBytes(docker, containerName, signal),
  ]);
  return toMetrics(info, stats, usedBytes);
}

/** The sample as the contract says it. Pure. */
export function toMetrics(
  info: Pick<Docker.ContainerInspectInfo, "State" | "HostConfig">,
  stats: DockerStats,
  usedBytes: number | undefined,
): SessionMetrics {
  const cpu = stats.cpu_stats;
  const pre = stats.precpu_stats;
  const readMs = Date.parse(stats.read ?? "");
  const prereadMs = Date.parse(stats.preread ?? "");
  const windowMs = Number.isFinite(readMs - prereadMs) && readMs > prereadMs ? readMs - prereadMs : 1000;
  // The engine's own ratio: the container's CPU time over the host's, times the host's CPUs.
  const systemDelta = (cpu?.system_cpu_usage ?? 0) - (pre?.system_cpu_usage ?? 0);
  const cpus = cpu?.online_cpus ?? 1;
  const cores =
    systemDelta > 0
      ? coresBetween(pre?.cpu_usage?.total_usage ?? 0, cpu?.cpu_usage?.total_usage ?? 0, systemDelta / cpus)
      : 0;
  const memory = stats.memory_stats;
  const cache =
    memory?.stats?.total_inactive_file ?? memory?.stats?.inactive_file ?? memory?.stats?.cache ?? 0;
  const host = info.HostConfig;
  const limitCores =
    (host.NanoCpus ?? 0) > 0
      ? (host.NanoCpus ?? 0) / 1e9
      : (host.CpuQuota ?? 0) > 0 && (host.CpuPeriod ?? 0) > 0
        ? (host.CpuQuota ?? 0) / (host.CpuPeriod ?? 1)
        : undefined;
  let rxBytes = 0;
  let txBytes = 0;
  for (const n of Object.values(stats.networks ?? {})) {
    rxBytes += n.rx_bytes ?? 0;
    txBytes += n.tx_bytes ?? 0;
  }
  return {
    since: info.State.StartedAt,
    sampledAt: Number.isFinite(readMs) ? new Date(readMs).toISOString() : new Date().toISOString(),
    cpu: { cores, ...(limitCores !== undefined ? { limitCores } : {}), windowMs: Math.round(windowMs) },
    memory: {
      bytes: Math.max(0, (memory?.usage ?? 0) - cache),
      ...((host.Memory ?? 0) > 0 ? { limitBytes: host.Memory } : {}),
    },
    network: { rxBytes, txBytes },
    ...(usedBytes !== undefined ? { volume: { usedBytes } } : {}),
  };
}

/** The volume's bytes in use (`du -sk` of /workspace, as the workload's user); undefined when it cannot tell. */
async function volumeBytes(
  docker: Docker,
  containerName: string,
  signal?: AbortSignal,
): Promise<number | undefined> {
  // coreutils' du, else busybox's (an image with neither reports no volume figure).
  const out = await execOutput(
    docker,
    containerName,
    ["/bin/sh", "-c", `du -sk ${WORKSPACE_ROOT} 2>/dev/null || busybox du -sk ${WORKSPACE_ROOT}`],
    signal,
  ).catch(() => undefined);
  const kib = Number(out?.stdout.trim().split(/\s+/)[0]);
  return Number.isFinite(kib) && out?.stdout.trim() ? kib * 1024 : undefined;
}
