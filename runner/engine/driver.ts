/**
 * The engine driver interface: one implementation per engine, each in its own folder with the
 * same file names for the same capability (runner/docker/, runner/kubernetes/: driver.ts,
 * exec.ts, fast-create.ts, workspace-files.ts, repo-seed.ts; index.ts makes the driver). The rest
 * of the runner never touches an engine directly (runner/import-boundaries.test.ts), and tests
 * use one fake (runner/engine/fake-driver.ts).
 */
import type { Writable } from "node:stream";
import type { SessionSpec, SnapshotStorage } from "../../contracts/session-spec.ts";
import type { RunnerCommand } from "../../contracts/runner-protocol.ts";
import type { SessionMetrics } from "../../contracts/session-metrics.ts";
import type { LogLine } from "../../contracts/session-logs.ts";
import type { WorkspaceEntry } from "../../contracts/workspace-files.ts";

/** A one-shot (v1alpha1) run, as the server asks for it. */
export type RunOnceCommand = Extract<RunnerCommand, { kind: "run_once" }>;
export type RunOnceOutcome = {
  /** null when the run was killed (timeout). */
  exit_code: number | null;
  /** stdout: its tail, bounded (runner/docker/run-output.ts). */
  output: string;
  /** Bytes of stdout dropped before `output`; absent when none were. */
  output_truncated_bytes?: number;
  timed_out: boolean;
  resolved_image_digest: string;
};

export type ProvisionResult = {
  containerName: string;
  endpoint: string;
  resolvedImageDigest: string;
  /**
   * The commit this provision seeded the workspace at (spec.repo); absent when it fetched nothing
   * (no repository, or seeded before). The server keeps it: the diff's only baseline.
   */
  seededCommit?: string;
  /** The snapshot storage this provision seeded the volume from (spec.seedSnapshot); absent when none. */
  seededSnapshot?: string;
};

/** Why an agent or its workspace went away unexpectedly. */
export type ExitReason =
  | "AgentExited"
  | "ContainerExited"
  | "OOMKilled"
  | "ContainerRemoved"
  | "EngineRestarted"
  | "PodDeleted"
  | "Evicted";

/** A running agent process inside a workspace, reached over a long-lived exec stream. */
export interface AgentProcess {
  /** Writes one line to the agent's stdin. */
  send(line: string): boolean;
  /** Ends the agent deliberately (stdin closed, then a signal). Resolves when it is gone. */
  stop(): Promise<void>;
  /** Resolves once when the process ends, with its exit code when the engine still knows it. */
  readonly exited: Promise<{ exitCode: number | null }>;
}

/**
 * Where the agent's stdout bytes go (runner/sessions/agent-stdout.ts): the driver pipes them in and honours
 * its backpressure all the way to the exec stream, so a slow sink slows the agent, never the runner.
 * The driver ends it when stdout ends.
 */
export type AgentOutput = Writable;

/** A staged upload: its size and a way to read it (once per write). */
export type WorkspaceUpload = { size: number; open: () => AsyncIterable<Buffer> };

/**
 * The files API of a workspace (contracts/workspace-files.ts). Paths are confined relative paths
 * ("" is /workspace); the engine side refuses symlinks leading out (INVALID_ARGUMENT) and answers
 * FAILED_PRECONDITION when the workload is not running.
 */
export interface WorkspaceFiles {
  /** `signal` (each method): the runner command's deadline or cancel; the engine stops its work on it. */
  list(containerName: string, path: string, signal?: AbortSignal): Promise<WorkspaceEntry[]>;
  /** A file's bytes, or a tar of the path. RESOURCE_EXHAUSTED up front when a file exceeds `maxBytes`. */
  read(
    containerName: string,
    path: string,
    what: "file" | "archive",
    maxBytes: number,
    signal?: AbortSignal,
  ): Promise<AsyncIterable<Buffer>>;
  /** Writes the whole file at once (missing parent directories are created). */
  write(containerName: string, path: string, upload: WorkspaceUpload): Promise<void>;
  /** Deletes a file or a directory tree (a symlink itself, never its target). NOT_FOUND when absent. */
  delete(containerName: string, path: string): Promise<boolean>;
  /**
   * A git diff of the checkout at `path` against `seededCommit` (the one the server recorded from
   * the provision that seeded it; never read from the workspace). FAILED_PRECONDITION when the
   * checkout is not there or lacks that commit.
   */
  diff?(
    containerName: string,
    path: string,
    seededCommit: string,
    signal?: AbortSignal,
  ): Promise<AsyncIterable<Buffer>>;
}

/**
 * Snapshots of a workspace's volume on the engine (contracts/session-snapshot.ts): each a storage
 * of its own (a Docker volume, a Kubernetes PVC) named `target.storage`, labelled with the
 * snapshot's namespace and name, declared in a stack of its own (`snapshotStackName`) recorded
 * behind the engine's work. The copies run in a short-lived hardened container (Docker) or pod
 * (Kubernetes) of the runner's git image with only the two volumes mounted, no network.
 */
export interface SessionSnapshots {
  /**
   * Copies the workspace's volume into a new storage `target` (the workload running, paused or
   * scaled to 0; never thawed). ALREADY_EXISTS when the storage exists. Resolves with the size once
   * the copy is whole.
   */
  take(containerName: string, target: SnapshotStorage, signal?: AbortSignal): Promise<{ sizeBytes: number }>;
  /** Destroys the storage and its stack; resolves false when there was nothing. */
  remove(target: SnapshotStorage): Promise<boolean>;
  /** A tar of the storage's files, every entry under `volume/`. RESOURCE_EXHAUSTED past `maxBytes`. */
  read(target: SnapshotStorage, maxBytes: number, signal?: AbortSignal): Promise<AsyncIterable<Buffer>>;
  /**
   * Makes the storage `target` from a tar whose entries are all under `volume/` (checked by the
   * server: files, directories, symlinks staying inside). ALREADY_EXISTS when it exists.
   */
  write(target: SnapshotStorage, upload: WorkspaceUpload): Promise<{ sizeBytes: number }>;
  /**
   * Replaces the files of the workspace's volume with the snapshot's. FAILED_PRECONDITION while
   * the workload runs; NOT_FOUND when either storage is missing.
   */
  restore(containerName: string, source: SnapshotStorage): Promise<void>;
  /**
   * Readies what a `restore` of `source` into the workspace will need while the workload is still
   * being stopped (on Kubernetes its copy pod, runner/kubernetes/snapshots.ts), copying nothing;
   * what the restore does not take in time is undone. Absent: nothing to ready. Never throws.
   */
  prepareRestore?(containerName: string, source: SnapshotStorage): void;
}

/**
 * What a provision is given besides the spec. `credentials` is all the workload ever holds: the
 * runner's gateway tokens, never a credential's value (runner/gateway/session-gateway.ts).
 * `repoCredentials` holds the real value of the one credential a workspace repository is fetched
 * with, for the seeding only, never in the workload's environment or its stack.
 */
export type ProvisionSecrets = {
  credentials: Record<string, string>;
  adapterToken: string;
  repoCredentials?: Record<string, string>;
};

export interface EngineDriver {
  readonly engine: "docker" | "kubernetes";
  /** Brings the session stack up at scale 1 (idempotent) and waits for the adapter to be ready. */
  provision(containerName: string, spec: SessionSpec, secrets: ProvisionSecrets): Promise<ProvisionResult>;
  /** True when the workload exists and runs. */
  isRunning(containerName: string): Promise<boolean>;
  /**
   * Starts the agent over an exec stream, its stdout piped into `output`. Throws a NOT_FOUND
   * CodedError when the workload is gone.
   */
  startAgent(
    containerName: string,
    command: string[],
    output: AgentOutput,
    /** The agent's stderr as it comes (its own log), for the session's logs. */
    stderr?: (chunk: string) => void,
  ): Promise<AgentProcess>;
  /**
   * The workload's own output as the engine keeps it (the adapter's or harness's stdout and
   * stderr), the last `tailLines` lines after `sinceTime`; empty when there is no workload. Absent:
   * the engine keeps none to read.
   */
  workloadLogs?(
    containerName: string,
    options: { tailLines: number; sinceTime?: string | undefined },
  ): Promise<LogLine[]>;
  /** Scale to 0: the workload goes, the volume stays. */
  scaleDown(containerName: string): Promise<void>;
  /** Destroys everything of the session, volume included. */
  remove(containerName: string): Promise<void>;
  /**
   * Freezes the workload with all its memory (Docker: the engine's pause); the stack is not
   * touched (a paused container is still the declared one). FAILED_PRECONDITION when the engine
   * cannot freeze (Kubernetes: runner/kubernetes/driver.ts says why) or the workload is not running.
   */
  pause(containerName: string): Promise<void>;
  /** Thaws a paused workload; a workload that is not paused is left as it is. */
  unpause(containerName: string): Promise<void>;
  /**
   * True when the engine holds the workload frozen now (Docker: `State.Paused`), whoever froze it:
   * a restarted runner asks, so it reports and keeps the paused workloads as they are.
   */
  isPaused(containerName: string): Promise<boolean>;
  /** The workload's memory usage in bytes as the engine counts it; undefined when it cannot tell. */
  memoryBytes(containerName: string): Promise<number | undefined>;
  /**
   * What the workload uses now (metrics.ts of each engine; contracts/session-metrics.ts): CPU over
   * a window of about a second, memory, network, volume. A paused workload is measured frozen,
   * never thawed. FAILED_PRECONDITION when it is not running.
   */
  metrics(containerName: string, signal?: AbortSignal): Promise<SessionMetrics>;
  /** Observes unexpected workload exits (crash, OOM, removal, engine restart). */
  watch(onExit: (containerName: string, reason: ExitReason, detail: string) => void): Promise<() => void>;
  /** host:port of the adapter for relayed requests. */
  endpoint(containerName: string): Promise<string>;
  /**
   * The adapter token the workspace's stack holds (a Pulumi secret of its config), for a runner
   * that restarted since it provisioned the workspace and so lost the token it was given.
   * Undefined when this runner holds no workspace (stack) of that name.
   */
  adapterToken(containerName: string): Promise<string | undefined>;
  /**
   * True when the engine reported an out-of-memory kill in the workload at or after `sinceMs`
   * (epoch ms): an agent that ends then was OOM-killed even if the workload lives on. Optional:
   * an engine that cannot tell leaves it out.
   */
  oomSince?(containerName: string, sinceMs: number): boolean;
  /**
   * A one-shot (v1alpha1) run to completion in a fresh container that is removed afterwards
   * (contracts/agent-run.ts). Engines without it answer `run_once` with UNIMPLEMENTED.
   */
  runOnce?(command: RunOnceCommand): Promise<RunOnceOutcome>;
  /**
   * The workspaces whose stack recording a previous runner process left unfinished (it died while
   * the fast path's `up` ran): their engine may be ahead of their stack. Optional.
   */
  interruptedRecordings?(): string[];
  /**
   * Records in the workspace's stack the state its engine holds now (running: replicas 1, else
   * 0), record-only: for a workspace of `interruptedRecordings`, run by the runner under the
   * workspace's operation lock. Optional.
   */
  recordEngineState?(containerName: string): Promise<void>;
  /**
   * The workspace's harness gave its first answer since its workload started (a relayed request
   * answered): a startup CPU boost ends (runner/docker/startup-boost.ts). Optional.
   */
  firstAnswered?(containerName: string): void;
  /**
   * Puts every workload a previous process of this runner left with a startup CPU boost back to
   * its declared limit; the workloads it reset. Optional; the runner calls it when it starts.
   */
  resetBoosts?(): Promise<string[]>;
  /** The workspace files API; engines without it answer the `workspace_*` commands UNIMPLEMENTED. */
  readonly workspace?: WorkspaceFiles;
  /** Snapshots; engines without them answer the `snapshot_*` commands UNIMPLEMENTED. */
  readonly snapshots?: SessionSnapshots;
}

/** Resolves once `output` has taken everything (finished or destroyed), or after `ms` at most. */
export function outputSettled(output: AgentOutput, ms: number): Promise<void> {
  if (output.writableFinished || output.destroyed) return Promise.resolve();
  return new Promise((resolve) => {
    const timer = setTimeout(done, ms);
    timer.unref?.();
    function done() {
      clearTimeout(timer);
      output.off("finish", done);
      output.off("close", done);
      output.off("error", done);
      resolve();
    }
    output.once("finish", done);
    output.once("close", done);
    output.once("error", done);
  });
}
