import { SessionMetrics } from "./session-metrics.ts";
import { LogLine } from "./session-logs.ts";
import { z } from "zod";
import { Usage } from "./adapter.ts";
import { SessionState } from "./compass.ts";
import type { RunnerCommand } from "./runner-protocol.ts";
import { SessionSpec } from "./session-spec.ts";
import { WorkspaceEntry } from "./workspace-files.ts";
import { SeededCommit } from "./workspace-repo.ts";

/**
 * The `result` a runner returns for each command kind (`CommandResult.result` when `ok`). Extra
 * fields are allowed (kept for forward compatibility) and ignored by the server.
 *
 * Errors (`ok: false`) carry a gRPC code. The server relies on these ones:
 * - `start`: `NOT_FOUND` when the container does not exist (checked before any exec).
 * - `stop`: `NOT_FOUND` when the runner does not know the session (the server treats it as stopped).
 * - `remove`: `NOT_FOUND` when there is nothing left to remove (the server treats it as removed).
 * - `probe`: `FAILED_PRECONDITION` when the runner cannot reach the adapter (no token, not
 *   running), `UNAVAILABLE` when the adapter does not answer ready.
 */
export const ProvisionResult = z.looseObject({
  container_name: z.string(),
  /** host:port the runner reaches the adapter at. */
  endpoint: z.string().optional(),
  resolved_image_digest: z.string().optional(),
  /**
   * The commit the workspace was seeded at (spec.repo), as this runner saw its seed fetch it;
   * absent when the runner knows of no seed (none asked, or one before this runner process). The
   * server keeps it with the workspace for every diff (contracts/workspace-repo.ts SeededCommit).
   */
  seeded_commit: SeededCommit.optional(),
  /**
   * The snapshot storage this provision seeded the workspace volume from (spec.seedSnapshot, a
   * fork); absent when it copied nothing. The server sends the seed no more once it saw this.
   */
  seeded_snapshot: z.string().optional(),
});
export const StartResult = z.looseObject({ state: SessionState.default("READY") });
export const StopResult = z.looseObject({ state: SessionState.default("STOPPED") });
export const RemoveResult = z.looseObject({ removed: z.boolean().default(true) });
export const ScaleDownResult = z.looseObject({});
export const PauseResult = z.looseObject({
  /** The workload is frozen now. */
  paused: z.boolean().default(true),
});
export const PausedMemoryResult = z.looseObject({
  /** The paused workload's memory usage as the engine reported it (bytes), when it did. */
  memory_bytes: z.number().int().nonnegative().optional(),
  /**
   * Paused workloads of this runner over its paused-memory budget, least recently paused first:
   * the server stops each (reason Evicted). Never a running workload.
   */
  evict: z.array(z.string()).default([]),
});
export const UnpauseResult = z.looseObject({
  /** False when the workload was not paused (nothing to do). */
  unpaused: z.boolean().default(true),
});
export const SendResult = z.looseObject({});
export const RelayResult = z.looseObject({ status: z.number().int().optional() });
/** The relay path is up: the adapter answered its readiness endpoint at `endpoint`. */
export const ProbeResult = z.looseObject({ endpoint: z.string().optional() });
export const CancelRelayResult = z.looseObject({ cancelled: z.boolean().optional() });
export const RunOnceResult = z.looseObject({
  /** The entry's exit code; null when it was killed (timeout). */
  exit_code: z.number().int().nullable(),
  /** The entry's stdout: its tail, bounded by the runner. */
  output: z.string(),
  /** Bytes of stdout dropped before `output` (a longer log); absent when nothing was. */
  output_truncated_bytes: z.number().int().nonnegative().optional(),
  timed_out: z.boolean(),
  resolved_image_digest: z.string().optional(),
  /**
   * The run's model calls through the runner's gateway, summed as the provider reported them;
   * "unavailable" when a call's answer carried none. Absent from runners without the gateway.
   */
  gateway_usage: Usage.optional(),
});

export const WarmPoolsResult = z.looseObject({
  /** Ready (unclaimed) entries per pool right now. */
  ready: z.record(z.string(), z.number().int()).default({}),
});
/** The claimed workspace: from now on an ordinary one of the claiming account. */
export const ClaimWarmResult = z.looseObject({
  container_name: z.string(),
  spec: SessionSpec,
  /** The entry's own adapter token (generated for it by the runner, never used before). */
  adapter_token: z.string(),
  endpoint: z.string().optional(),
  resolved_image_digest: z.string().optional(),
});

export const WorkspaceListResult = z.looseObject({ entries: z.array(WorkspaceEntry) });
export const WorkspaceReadResult = z.looseObject({ size: z.number().int().nonnegative() });
export const WorkspaceWriteChunkResult = z.looseObject({ size: z.number().int().nonnegative() });
export const WorkspaceDeleteChunkResult = z.looseObject({ deleted: z.boolean() });

/** The snapshot is whole on the engine: its files' apparent sizes summed. */
export const SnapshotTakeResult = z.looseObject({ size_bytes: z.number().int().nonnegative() });
export const SnapshotDeleteResult = z.looseObject({ deleted: z.boolean().default(true) });
export const SnapshotReadResult = z.looseObject({ size: z.number().int().nonnegative() });
/** Bytes staged so far; with `done`, also the made storage's `size_bytes`. */
export const SnapshotWriteChunkResult = z.looseObject({
  size: z.number().int().nonnegative(),
  size_bytes: z.number().int().nonnegative().optional(),
});
export const SnapshotRestoreResult = z.looseObject({});
export const SessionMetricsResult = z.looseObject({ metrics: SessionMetrics });
export const SessionLogsResult = z.looseObject({ lines: z.array(LogLine), truncated: z.boolean() });

export const CommandResultSchemas = {
  provision: ProvisionResult,
  start: StartResult,
  stop: StopResult,
  send: SendResult,
  scale_down: ScaleDownResult,
  pause: PauseResult,
  paused_memory: PausedMemoryResult,
  unpause: UnpauseResult,
  remove: RemoveResult,
  relay: RelayResult,
  probe: ProbeResult,
  cancel_relay: CancelRelayResult,
  run_once: RunOnceResult,
  warm_pools: WarmPoolsResult,
  claim_warm: ClaimWarmResult,
  workspace_list: WorkspaceListResult,
  workspace_read: WorkspaceReadResult,
  workspace_write: WorkspaceWriteChunkResult,
  workspace_delete: WorkspaceDeleteChunkResult,
  snapshot_take: SnapshotTakeResult,
  snapshot_delete: SnapshotDeleteResult,
  snapshot_read: SnapshotReadResult,
  snapshot_write: SnapshotWriteChunkResult,
  snapshot_restore: SnapshotRestoreResult,
  snapshot_restore_prepare: SnapshotRestoreResult,
  session_metrics: SessionMetricsResult,
  port_request: z.object({ status: z.number().int() }),
  port_socket: z.object({ code: z.number().int().optional(), reason: z.string().optional() }),
  port_socket_send: z.object({}),
  port_socket_close: z.object({ closed: z.boolean() }),
  session_logs: SessionLogsResult,
} as const satisfies Record<RunnerCommand["kind"], z.ZodType>;
export type CommandResultOf<K extends RunnerCommand["kind"]> = z.infer<(typeof CommandResultSchemas)[K]>;
