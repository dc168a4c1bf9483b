/**
 * A session workload's metrics on Kubernetes (contracts/session-metrics.ts), with no cluster
 * add-on (metrics-server) and no access to the node (the kubelet's stats need `nodes/proxy`, which
 * reaches every pod of the node): the runner execs a short read-only script in the session pod's
 * adapter container, where the adapter and its agent run, reading that container's own cgroup
 * (v1 or v2) twice a second apart, the pod's network counters (/proc/net/dev) and `du` of the
 * volume. The exec is the runner's own, as for the files API; no client ever execs.
 */
import type { V1Pod } from "@kubernetes/client-node";
import { CodedError } from "../../contracts/errors.ts";
import { coresBetween, type SessionMetrics } from "../../contracts/session-metrics.ts";
import { ADAPTER_CONTAINER } from "../../contracts/session-pod.ts";
import { WORKSPACE_ROOT } from "../../contracts/workspace-files.ts";
import type { PodExec } from "./exec.ts";

/** Tagged lines only (`tag value…`), shell builtins and cat, du, sleep: what every runtime image has. */
export const METRICS_SCRIPT = `
C=/sys/fs/cgroup
sample() {
  printf 'uptime '; cat /proc/uptime
  if [ -f $C/cpu.stat ]; then
    while read -r k v; do [ "$k" = usage_usec ] && echo "cpu_usec $v"; done < $C/cpu.stat
  elif [ -f $C/cpuacct/cpuacct.usage ]; then
    printf 'cpu_ns '; cat $C/cpuacct/cpuacct.usage
  else
    printf 'cpu_ns '; cat $C/cpu,cpuacct/cpuacct.usage
  fi
}
sample
sleep 1
sample
if [ -f $C/memory.current ]; then
  printf 'mem '; cat $C/memory.current
  printf 'mem_max '; cat $C/memory.max
  while read -r k v; do [ "$k" = inactive_file ] && echo "inactive $v"; done < $C/memory.stat
  printf 'cpu_max '; cat $C/cpu.max
else
  printf 'mem '; cat $C/memory/memory.usage_in_bytes
  printf 'mem_max '; cat $C/memory/memory.limit_in_bytes
  while read -r k v; do [ "$k" = total_inactive_file ] && echo "inactive $v"; done < $C/memory/memory.stat
  Q=$C/cpu; [ -f $Q/cpu.cfs_quota_us ] || Q=$C/cpu,cpuacct
  printf 'cpu_max '; echo "$(cat $Q/cpu.cfs_quota_us) $(cat $Q/cpu.cfs_period_us)"
fi
while read -r line; do echo "net $line"; done < /proc/net/dev
printf 'du '; du -sk ${WORKSPACE_ROOT} 2>/dev/null || busybox du -sk ${WORKSPACE_ROOT} 2>/dev/null || echo
`;

/** A limit a cgroup reports as none: v2's `max`, v1's page-rounded 2^63. */
const NO_LIMIT_BYTES = 2 ** 60;

/** The script's output as the contract says it; `since` is the container's start. Pure. */
export function parseMetricsOutput(text: string, since: string, sampledAt: Date): SessionMetrics {
  const uptimes: number[] = [];
  const cpuNs: number[] = [];
  let mem = 0;
  let memMax: number | undefined;
  let inactive = 0;
  let limitCores: number | undefined;
  let rxBytes = 0;
  let txBytes = 0;
  let usedBytes: number | undefined;
  for (const line of text.split("\n")) {
    const [tag = "", ...rest] = line.trim().split(/\s+/);
    const first = rest[0] ?? "";
    switch (tag) {
      case "uptime":
        uptimes.push(Number(first) * 1e9);
        break;
      case "cpu_usec":
        cpuNs.push(Number(first) * 1000);
        break;
      case "cpu_ns":
        cpuNs.push(Number(first));
        break;
      case "mem":
        mem = Number(first) || 0;
        break;
      case "mem_max": {
        const max = Number(first);
        memMax = first !== "max" && Number.isFinite(max) && max > 0 && max < NO_LIMIT_BYTES ? max : undefined;
        break;
      }
      case "inactive":
        inactive = Number(first) || 0;
        break;
      case "cpu_max": {
        const quota = Number(first);
        const period = Number(rest[1]);
        limitCores = first !== "max" && quota > 0 && period > 0 ? quota / period : undefined;
        break;
      }
      case "net": {
        // `eth0: rx_bytes packets … (8 fields) tx_bytes …`; the header lines have no colon field.
        const joined = rest.join(" ");
        const colon = joined.indexOf(":");
        if (colon < 0) break;
        const name = joined.slice(0, colon).trim();
        const fields = joined
          .slice(colon + 1)
          .trim()
          .split(/\s+/)
          .map(Number);
        if (name === "lo" || fields.length < 9) break;
        rxBytes += fields[0] ?? 0;
        txBytes += fields[8] ?? 0;
        break;
      }
      case "du": {
        const kib = Number(first);
        usedBytes = first !== "" && Number.isFinite(kib) ? kib * 1024 : undefined;
        break;
      }
    }
  }
  const [u0 = 0, u1 = 0] = uptimes;
  const [c0 = 0, c1 = 0] = cpuNs;
  const wallNs = u1 - u0;
  return {
    since,
    sampledAt: sampledAt.toISOString(),
    cpu: {
      cores: coresBetween(c0, c1, wallNs),
      ...(limitCores !== undefined ? { limitCores } : {}),
      windowMs: Math.max(1, Math.round(wallNs / 1e6)),
    },
    memory: { bytes: Math.max(0, mem - inactive), ...(memMax !== undefined ? { limitBytes: memMax } : {}) },
    network: { rxBytes, txBytes },
    ...(usedBytes !== undefined ? { volume: { usedBytes } } : {}),
  };
}

/** Reads the metrics of `pod` (the session's Ready pod) by the script above. */
export async function podMetrics(
  exec: PodExec,
  containerName: string,
  pod: V1Pod | undefined,
  signal?: AbortSignal,
): Promise<SessionMetrics> {
  const podName = pod?.metadata?.name;
  if (!pod || !podName)
    throw new CodedError(
      "FAILED_PRECONDITION",
      `workspace ${containerName} has no running pod (the session is stopped): nothing to measure`,
    );
  const run = await exec.stream(podName, ADAPTER_CONTAINER, ["/bin/sh", "-c", METRICS_SCRIPT]);
  signal?.addEventListener("abort", () => run.close(), { once: true });
  const chunks: Buffer[] = [];
  for await (const chunk of run.stdout) chunks.push(chunk as Buffer);
  const code = await run.exit;
  const text = Buffer.concat(chunks).toString("utf8");
  if (!text.includes("uptime"))
    throw new CodedError(
      "UNAVAILABLE",
      `reading the metrics of ${containerName} failed (exit ${code}): ${run.stderr().slice(0, 300)}`,
    );
  const started = pod.status?.containerStatuses?.find((c) => c.name === ADAPTER_CONTAINER)?.state?.running
    ?.startedAt;
  const since = started
    ? new Date(started).toISOString()
    : (pod.status?.startTime?.toISOString() ?? new Date().toISOString());
  return parseMetricsOutput(text, since, new Date());
}
