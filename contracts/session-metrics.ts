import { z } from "zod";

/**
 * What a session's workload uses now (issue 40), as its engine says: `GET
 * /v1/namespaces/{ns}/harnesssessions/{name}/metrics`. Read on demand from the engine (Docker: the
 * container's stats; Kubernetes: the adapter container's own cgroup and network counters, read by
 * the runner's exec: no cluster add-on), never stored. A read is an observation: it neither counts
 * as activity nor wakes a paused session.
 */
const Bytes = z.number().int().nonnegative();

export const SessionMetrics = z.object({
  /** When the workload (container, pod) started: the counters below run from then. */
  since: z.string(),
  /** When this sample was read. */
  sampledAt: z.string(),
  cpu: z.object({
    /** Cores used on average over `windowMs` (1.5 = one and a half cores busy). */
    cores: z.number().nonnegative(),
    /** The workload's CPU limit in cores; absent when it has none. */
    limitCores: z.number().positive().optional(),
    /** The window `cores` was measured over. */
    windowMs: z.number().int().positive(),
  }),
  memory: z.object({
    /** The working set: memory in use less the page cache the kernel may drop (what `docker stats` shows). */
    bytes: Bytes,
    /** The workload's memory limit; absent when it has none. */
    limitBytes: Bytes.optional(),
  }),
  /** Bytes received and sent by the workload's network interfaces since `since`. */
  network: z.object({ rxBytes: Bytes, txBytes: Bytes }),
  /**
   * The session volume's bytes in use (its files' blocks); absent when it could not be read now (a
   * paused workload cannot be looked into).
   */
  volume: z.object({ usedBytes: Bytes }).optional(),
});
export type SessionMetrics = z.infer<typeof SessionMetrics>;

/** The answer of `GET …/harnesssessions/{name}/metrics`. */
export const SessionMetricsReply = z.object({
  namespace: z.string(),
  name: z.string(),
  /** The session's phase when it was read: Ready, Paused (frozen: no CPU, memory kept) or Draining. */
  phase: z.string(),
  engine: z.enum(["docker", "kubernetes"]),
  metrics: SessionMetrics,
});
export type SessionMetricsReply = z.infer<typeof SessionMetricsReply>;

/**
 * Cores used between two cumulative CPU-time readings (nanoseconds) taken `wallNs` apart; 0 when
 * the window is empty or the counter went back (a restart between the reads). Pure.
 */
export function coresBetween(cpuNsBefore: number, cpuNsAfter: number, wallNs: number): number {
  if (wallNs <= 0 || cpuNsAfter < cpuNsBefore) return 0;
  return Math.round(((cpuNsAfter - cpuNsBefore) / wallNs) * 1000) / 1000;
}
