/**
 * The Docker driver: provisioning through the session stack (stacks/), the agent over a
 * long-lived hijacked exec stream (runner/docker/exec.ts), and exits observed through engine events (an exec stream cut
 * by `docker rm -f` loses its exit code, the exec's inspect answering 404: the events say what happened).
 *
 * Create, stop and resume take a fast path (AGENT_SESSIONS_FAST_PATH=off turns it off): a first
 * create (no stack yet) is judged by the policy pack in process and made at once
 * (runner/docker/fast-create.ts); a stop removes the container; a resume makes it from exactly
 * the inputs of the last `up` at scale 1 this driver ran for the session (so from nothing the
 * policy pack did not pass) — all directly on the engine with the provider's own code
 * (infra/docker/provider/session-container.ts, session-network.ts); the call answers then, and
 * the stack records the change with an `up` in the background (the provider adopts volume,
 * network and container, or finds the container already gone; record-only, it never makes one).
 * The session's next operation does not wait for that `up`: recordings coalesce to the latest
 * state (runner/engine/fast-path.ts); a drift check outside the runner waits for them
 * (stacks/recording.ts). Anything else — a changed spec or credentials, a crashed
 * container, a runner that restarted since, a pack that cannot be judged in process — takes the
 * full path through `pulumi up`.
 */
import type { SessionMetrics } from "../../contracts/session-metrics.ts";
import { dockerSessionMetrics } from "./metrics.ts";
import { dockerWorkloadLogs } from "./logs.ts";
import type { LogLine } from "../../contracts/session-logs.ts";
import type Docker from "dockerode";
import { ADAPTER_PORT } from "../../contracts/adapter.ts";
import { CodedError, parseOrThrow } from "../../contracts/errors.ts";
import { Labels, SessionSpec, workloadName } from "../../contracts/session-spec.ts";
import {
  containerSpecInputs,
  ensureSessionContainer,
  networkGateway,
  removeSessionContainer,
} from "../../infra/docker/provider/session-container.ts";
import { fastContainerInputs, fastCreateDocker } from "./fast-create.ts";
import type { StackManager } from "../../stacks/index.ts";
import { startAgentExec } from "./exec.ts";
import { runOnce } from "./one-shot.ts";
import { containerMemoryBytes, containerPaused, pauseContainer, unpauseContainer } from "./pause.ts";
import { seedWorkspaceRepo } from "./repo-seed.ts";
import { type StartupBoostSettings, StartupBoosts } from "./startup-boost.ts";
import { DockerSnapshots } from "./snapshots.ts";
import {
  removeOrphanContainer,
  removeSessionContainers,
  removeSessionLeftovers,
} from "./session-leftovers.ts";
import { DockerWorkspaceFiles, isContainerRunning } from "./workspace-files.ts";
import { watchWorkloadExits } from "./workload-watch.ts";
import { type DriverLog, FastPathRecords, recordKey, type Secrets } from "../engine/fast-path.ts";
import type {
  AgentOutput,
  AgentProcess,
  EngineDriver,
  ExitReason,
  ProvisionResult,
  ProvisionSecrets,
  RunOnceCommand,
  RunOnceOutcome,
} from "../engine/driver.ts";

type Placement = { namespace: string; name: string };

export class DockerDriver implements EngineDriver {
  readonly engine = "docker" as const;
  readonly #docker: Docker;
  readonly #stacks: StackManager;
  readonly #placements = new Map<string, Placement>();
  /** When the engine last reported an `oom` event per container (the watcher records it). */
  readonly #ooms = new Map<string, number>();
  /**
   * The adapter's address per workspace, from the last `up` at scale 1: relayed requests must not
   * pay a Pulumi CLI round trip (`stack output`) each. Dropped when the workload goes.
   */
  readonly #endpoints = new Map<string, string>();

  readonly workspace: DockerWorkspaceFiles;
  readonly snapshots: DockerSnapshots;
  readonly #fastPath: boolean;
  readonly #createsFast: boolean;
  readonly #log: DriverLog;
  /** What each workspace's stack records, and the background `up`s recording fast-path changes. */
  readonly #records: FastPathRecords;

  readonly #gitImage: string | undefined;
  /** A session container's CPU raised while it starts (runner/docker/startup-boost.ts). */
  readonly #boosts: StartupBoosts;

  constructor(
    docker: Docker,
    stacks: StackManager,
    options: {
      fastPath?: boolean;
      /** A first create takes the fast path too (runner/docker/fast-create.ts). @default fastPath */
      fastCreate?: boolean;
      log?: DriverLog;
      /** The digest-pinned image a workspace is seeded from a repository with (runner/docker/repo-seed.ts). */
      gitImage?: string | undefined;
      /** The startup CPU boost; none: off. */
      startupBoost?: StartupBoostSettings;
      /** Where the boosted containers are kept across restarts (`<data-dir>/startup-boosts.json`). */
      startupBoostFile?: string | undefined;
    } = {},
  ) {
    this.#docker = docker;
    this.#gitImage = options.gitImage;
    this.workspace = new DockerWorkspaceFiles(docker, options.gitImage);
    this.#stacks = stacks;
    this.#log = options.log ?? (() => undefined);
    this.snapshots = new DockerSnapshots(docker, options.gitImage, stacks, this.#log);
    this.#fastPath = options.fastPath ?? true;
    this.#createsFast = this.#fastPath && (options.fastCreate ?? true);
    this.#records = new FastPathRecords(this.#log);
    this.#boosts = new StartupBoosts(docker, options.startupBoost ?? { cores: 0, maxMs: 0 }, {
      file: options.startupBoostFile,
      log: this.#log,
    });
  }

  /** The boost of a container this driver makes, raised between its create and its start. */
  #boostOnStart(containerName: string, spec: SessionSpec) {
    const declared = containerSpecInputs(spec).nanoCpus;
    return (containerId: string) => this.#boosts.start(containerName, containerId, declared);
  }

  /** The harness of the workspace gave its first answer: its CPU goes back to the declared limit. */
  firstAnswered(containerName: string): void {
    void this.#boosts.end(containerName, "answered");
  }

  /** Every container a previous process of this runner left boosted, back to its declared limit. */
  resetBoosts(): Promise<string[]> {
    return this.#boosts.reset();
  }

  /** Resolves when the workspace's last fast-path change is recorded in its stack (at once if none). */
  settled(containerName: string): Promise<void> {
    return this.#records.settled(containerName);
  }

  /**
   * Resume on the engine at once: the container of the last recorded inputs, then recorded. A
   * heal (the recorded container exited or went while it should run) replaces it the same way;
   * its stack still holds the lost container, so the recording refreshes first (which drops it)
   * and the `up` then adopts the new one.
   */
  async #fastResume(containerName: string, spec: SessionSpec, secrets: Secrets, key: string, heal = false) {
    const parsed = parseOrThrow(SessionSpec, { ...spec, replicas: 1 }, "session spec");
    const done = this.#stacks.markRecording(parsed.namespace, parsed.name);
    let running: Awaited<ReturnType<typeof ensureSessionContainer>>;
    try {
      const gateway = await networkGateway(this.#docker, containerSpecInputs(parsed).networkMode);
      running = await ensureSessionContainer(
        this.#docker,
        fastContainerInputs(parsed, secrets, gateway),
        60_000,
        { beforeStart: this.#boostOnStart(containerName, parsed) },
      );
    } catch (error) {
      this.#boosts.forget(containerName);
      done();
      this.#log("warn", "fast resume failed; taking the full path", {
        container: containerName,
        error: (error as Error).message.slice(0, 500),
      });
      return undefined;
    }
    const endpoint = `${running.ipAddress}:${parsed.session?.port ?? ADAPTER_PORT}`;
    this.#endpoints.set(containerName, endpoint);
    // A heal's stack still holds the lost container: refreshed first, the `up` adopts the new one.
    this.#records.record(
      containerName,
      { key, replicas: 1 },
      ({ refresh }) => this.#stacks.up(parsed, secrets, { recordOnly: true, refresh: refresh || heal }),
      done,
    );
    return { containerName, endpoint, resolvedImageDigest: running.resolvedImageDigest };
  }

  /**
   * A first create on the engine at once (runner/docker/fast-create.ts: judged by the policy pack
   * in process first), then recorded by the stack's own `up` in the background.
   */
  async #fastCreate(
    containerName: string,
    spec: SessionSpec,
    secrets: Secrets,
    key: string,
    beforeContainer?: Promise<void>,
  ) {
    const parsed = parseOrThrow(SessionSpec, { ...spec, replicas: 1 }, "session spec");
    const done = this.#stacks.markRecording(parsed.namespace, parsed.name);
    let running: Awaited<ReturnType<typeof fastCreateDocker>>;
    try {
      running = await fastCreateDocker(
        this.#docker,
        this.#stacks,
        parsed,
        secrets,
        (level, msg, fields) => this.#log(level, msg, { container: containerName, ...fields }),
        { beforeContainer, beforeStart: this.#boostOnStart(containerName, parsed) },
      );
    } catch (error) {
      this.#boosts.forget(containerName);
      done();
      throw error;
    }
    if (!running) {
      this.#boosts.forget(containerName);
      done();
      return undefined;
    }
    const endpoint = `${running.ipAddress}:${parsed.session?.port ?? ADAPTER_PORT}`;
    this.#endpoints.set(containerName, endpoint);
    this.#records.record(
      containerName,
      { key, replicas: 1 },
      () => this.#stacks.up(parsed, secrets, { recordOnly: true }),
      done,
    );
    return { containerName, endpoint, resolvedImageDigest: running.resolvedImageDigest };
  }

  async provision(
    containerName: string,
    forkSpec: SessionSpec,
    secrets: ProvisionSecrets,
  ): Promise<ProvisionResult> {
    if (workloadName(forkSpec.namespace, forkSpec.name) !== containerName) {
      throw new CodedError(
        "INVALID_ARGUMENT",
        `container_name ${containerName} does not match the session spec`,
      );
    }
    // A fork's volume is made and seeded before anything mounts it (the agent reads its files
    // when it starts); the provider adopts it. Once: a volume already there is never seeded again.
    // The copy runs while the rest is prepared (judged, its network made); the container that
    // mounts the volume is made only once it ended.
    const seeding = await this.snapshots.seed(forkSpec);
    // The seed is the provision's, never the workload's: kept out of the stack and the record key.
    const { seedSnapshot: _seed, ...spec } = forkSpec;
    let result: ProvisionResult;
    try {
      result = await this.#provision(containerName, spec, secrets, seeding?.copied);
      await seeding?.copied;
    } catch (error) {
      // Never answered while the copy still runs: a retried provision finds it ended.
      await seeding?.copied.catch(() => undefined);
      throw error;
    }
    return seeding ? { ...result, seededSnapshot: seeding.storage } : result;
  }

  /** `seeded`: a fork's copy into the volume, which must have ended before anything mounts it. */
  async #provision(
    containerName: string,
    spec: SessionSpec,
    secrets: ProvisionSecrets,
    seeded?: Promise<void>,
  ): Promise<ProvisionResult> {
    this.#placements.set(containerName, { namespace: spec.namespace, name: spec.name });
    // Never waits for the recording of an earlier operation (runner/engine/fast-path.ts).
    const key = recordKey(spec, secrets);
    const last = this.#records.get(containerName);
    // Resumed (nothing runs) or healed (what should run exited: a crash, an OOM, the engine
    // restarted, or it was removed) from the inputs last recorded, when nothing else changed.
    const heal = last?.replicas === 1 && !(await this.isRunning(containerName));
    if (
      this.#fastPath &&
      last?.key === key &&
      (heal || (last.replicas === 0 && !(await this.#exists(containerName))))
    ) {
      await seeded;
      const fast = await this.#fastResume(containerName, spec, secrets, key, heal);
      if (fast) return this.#seeded(fast, spec, secrets);
    }
    // A first create (no stack yet, nothing recorded here): made at once, recorded behind.
    if (this.#createsFast && !last && !(await this.#stacks.exists(spec.namespace, spec.name))) {
      const fast = await this.#fastCreate(containerName, spec, secrets, key, seeded);
      if (fast) return this.#seeded(fast, spec, secrets);
    }
    await seeded;
    this.#records.forget(containerName);
    await this.#forgetLostContainer(containerName, spec);
    this.#endpoints.delete(containerName);
    const outputs = await this.#stacks.up({ ...spec, replicas: 1 }, secrets);
    this.#records.set(containerName, { key, replicas: 1 });
    // Made by the stack's provider: raised once it runs, when it has just started.
    await this.#boostJustStarted(containerName, spec);
    if (outputs.endpoint) this.#endpoints.set(containerName, outputs.endpoint);
    // Once, before any agent session starts in it: a seeded checkout is never fetched again.
    return this.#seeded(
      { containerName, endpoint: outputs.endpoint, resolvedImageDigest: outputs.resolvedImageDigest },
      spec,
      secrets,
    );
  }

  /** A container the full path made (it started within the boost's bound): boosted for the rest of its start. */
  async #boostJustStarted(containerName: string, spec: SessionSpec): Promise<void> {
    if (!this.#boosts.enabled) return;
    const info = await this.#runningContainer(containerName);
    if (!info || Date.now() - Date.parse(info.State.StartedAt) > this.#boosts.maxMs) return;
    await this.#boosts.start(containerName, info.Id, containerSpecInputs(spec).nanoCpus);
  }

  /** `provisioned` once the workspace is seeded from `spec.repo`, with the commit a seed now fetched. */
  async #seeded(
    provisioned: ProvisionResult,
    spec: SessionSpec,
    secrets: ProvisionSecrets,
  ): Promise<ProvisionResult> {
    const seededCommit = await seedWorkspaceRepo(
      this.#docker,
      this.#gitImage,
      spec,
      secrets.repoCredentials ?? {},
    );
    return seededCommit ? { ...provisioned, seededCommit } : provisioned;
  }

  /**
   * A re-provision replaces a container that was removed outside or is no longer running (it
   * exited, was OOM-killed): `up` alone trusts the stack's state and would change nothing. An
   * exited container is removed, then `refresh` drops what is gone from the state, so `up`
   * creates it again under its name (the volume, untouched, keeps the workspace).
   */
  async #forgetLostContainer(containerName: string, spec: SessionSpec): Promise<void> {
    let state: { Running: boolean } | undefined;
    try {
      state = (await this.#docker.getContainer(containerName).inspect()).State;
    } catch {
      state = undefined; // gone
    }
    if (state?.Running) return;
    if (!(await this.#stacks.exists(spec.namespace, spec.name))) return; // a first provision
    if (state) await this.#docker.getContainer(containerName).remove({ force: true });
    await this.#stacks.refresh(spec.namespace, spec.name);
  }

  async #exists(containerName: string): Promise<boolean> {
    return this.#docker
      .getContainer(containerName)
      .inspect()
      .then(
        () => true,
        () => false,
      );
  }

  async #placement(containerName: string): Promise<Placement | undefined> {
    const known = this.#placements.get(containerName);
    if (known) return known;
    // After a runner restart: find the session by the labels on its volume.
    const { Volumes } = await this.#docker.listVolumes({
      filters: JSON.stringify({ label: [`${Labels.managedBy}=agent-sessions`] }),
    });
    for (const v of Volumes ?? []) {
      const ns = v.Labels?.[Labels.namespace];
      const name = v.Labels?.[Labels.session];
      if (ns && name && workloadName(ns, name) === containerName) {
        const p = { namespace: ns, name };
        this.#placements.set(containerName, p);
        return p;
      }
    }
    return undefined;
  }

  oomSince(containerName: string, sinceMs: number): boolean {
    return (this.#ooms.get(containerName) ?? Number.NEGATIVE_INFINITY) >= sinceMs;
  }

  isRunning(containerName: string): Promise<boolean> {
    return isContainerRunning(this.#docker, containerName);
  }

  async endpoint(containerName: string): Promise<string> {
    const p = await this.#placement(containerName);
    if (!p) throw new CodedError("NOT_FOUND", `workspace ${containerName} not found`);
    const cached = this.#endpoints.get(containerName);
    if (cached) return cached;
    // After a runner restart: the running container's address on its session network (a fast
    // path's recording may not have finished before the previous process died), else the last
    // `up`'s outputs, kept until the workload goes.
    const running = await this.#runningContainer(containerName);
    // The session network is named after the workload (infra/docker/provider/session-network.ts).
    const ip = running?.NetworkSettings.Networks[`${containerName}-net`]?.IPAddress;
    // The port the adapter was started on (containerEnv: an openai-chat harness's own).
    const port = running?.Config.Env?.find((e) => e.startsWith("ADAPTER_PORT="))?.slice(
      "ADAPTER_PORT=".length,
    );
    const endpoint = ip
      ? `${ip}:${port ?? ADAPTER_PORT}`
      : (await this.#stacks.outputs(p.namespace, p.name)).endpoint;
    if (endpoint) this.#endpoints.set(containerName, endpoint);
    return endpoint;
  }

  async adapterToken(containerName: string): Promise<string | undefined> {
    const p = await this.#placement(containerName);
    if (!p) return undefined;
    // A running container's own token first: it is the one its adapter checks, and it is there
    // even when the stack never recorded it (a fast path's recording that died with its process).
    const env = (await this.#runningContainer(containerName))?.Config.Env ?? [];
    const running = env.find((e) => e.startsWith("ADAPTER_TOKEN="))?.slice("ADAPTER_TOKEN=".length);
    if (running) return running;
    return this.#stacks.adapterToken(p.namespace, p.name).catch((e: unknown) => {
      if ((e as { code?: string }).code === "NOT_FOUND") return undefined;
      throw e;
    });
  }

  async #runningContainer(containerName: string): Promise<Docker.ContainerInspectInfo | undefined> {
    const info = await this.#docker
      .getContainer(containerName)
      .inspect()
      .catch(() => undefined);
    return info?.State.Running ? info : undefined;
  }

  async startAgent(
    containerName: string,
    command: string[],
    output: AgentOutput,
    stderr?: (chunk: string) => void,
  ): Promise<AgentProcess> {
    if (!(await isContainerRunning(this.#docker, containerName)))
      throw new CodedError("NOT_FOUND", `workspace ${containerName} has no running container`);
    return startAgentExec(this.#docker, containerName, command, output, stderr);
  }

  workloadLogs(
    containerName: string,
    options: { tailLines: number; sinceTime?: string | undefined },
  ): Promise<LogLine[]> {
    return dockerWorkloadLogs(this.#docker, containerName, options);
  }

  runOnce(command: RunOnceCommand): Promise<RunOnceOutcome> {
    return runOnce(this.#docker, command);
  }

  async scaleDown(containerName: string): Promise<void> {
    const p = await this.#placement(containerName);
    if (!p) throw new CodedError("NOT_FOUND", `workspace ${containerName} not found`);
    this.#endpoints.delete(containerName);
    // Back to its declared limit first: a stop that fails leaves it running as declared.
    await this.#boosts.end(containerName);
    const fast = this.#fastPath
      ? async () => {
          const done = this.#stacks.markRecording(p.namespace, p.name);
          try {
            await removeSessionContainer(this.#docker, containerName);
          } catch (error) {
            done();
            throw error;
          }
          return done;
        }
      : undefined;
    await this.#records.scaleDown(containerName, fast, (recording) =>
      this.#stacks.scaleDown(p.namespace, p.name, { recordOnly: recording !== undefined }),
    );
  }

  interruptedRecordings(): string[] {
    return this.#stacks.interruptedRecordings().map((p) => {
      const containerName = workloadName(p.namespace, p.name);
      this.#placements.set(containerName, p);
      return containerName;
    });
  }

  async recordEngineState(containerName: string): Promise<void> {
    const p = await this.#placement(containerName);
    if (!p) return;
    this.#records.forget(containerName);
    const done = this.#stacks.markRecording(p.namespace, p.name);
    try {
      // The stack may hold a container the engine replaced: refreshed in the same `up`.
      if (await this.isRunning(containerName))
        await this.#stacks.resume(p.namespace, p.name, { recordOnly: true, refresh: true });
      else await this.#stacks.scaleDown(p.namespace, p.name, { recordOnly: true });
    } finally {
      done();
    }
  }

  async pause(containerName: string): Promise<void> {
    // Frozen at its declared limit (and so woken at it).
    await this.#boosts.end(containerName);
    return pauseContainer(this.#docker, containerName);
  }

  async unpause(containerName: string): Promise<void> {
    await unpauseContainer(this.#docker, containerName);
  }

  memoryBytes(containerName: string): Promise<number | undefined> {
    return containerMemoryBytes(this.#docker, containerName);
  }

  isPaused(containerName: string): Promise<boolean> {
    return containerPaused(this.#docker, containerName);
  }

  metrics(containerName: string, signal?: AbortSignal): Promise<SessionMetrics> {
    return dockerSessionMetrics(this.#docker, containerName, signal);
  }

  async remove(containerName: string): Promise<void> {
    const p = await this.#placement(containerName);
    // Nothing of ours but maybe a container whose volume went: removal is idempotent.
    if (!p) {
      if (await removeOrphanContainer(this.#docker, containerName))
        this.#log("warn", "removed a container left without its volume", { containerName });
      return;
    }
    // A pending recording is dropped; one running finishes first (under the stack's lock anyway).
    // A snapshot copy container still being removed would keep the session's volume in use.
    this.#records.forget(containerName);
    await this.#boosts.end(containerName);
    await Promise.all([this.settled(containerName), this.snapshots.copiesRemoved()]);
    const destroy = () =>
      this.#stacks.destroy(p.namespace, p.name).catch((e: unknown) => {
        if ((e as { code?: string }).code !== "NOT_FOUND") throw e;
      });
    await destroy().catch(async (error: unknown) => {
      // A fast-path container the stack does not hold yet (its recording overtaken by this
      // remove) keeps the session's network in use, and the destroy fails on it: the session's
      // containers go by their labels, and the destroy runs again (what it holds is gone or goes).
      const containers = await removeSessionContainers(this.#docker, p);
      if (containers.length === 0) throw error;
      this.#log(
        "warn",
        "stack destroy failed beside containers it did not hold: removed them, destroying again",
        {
          containerName,
          containers,
          error: String((error as Error).message ?? error).slice(0, 300),
        },
      );
      await destroy();
    });
    // What the stack did not hold (a fast-path container whose recording a restart cut short).
    const leftovers = await removeSessionLeftovers(this.#docker, p);
    if (leftovers.length > 0)
      this.#log("warn", "removed what the stack did not hold", { containerName, leftovers });
    this.#placements.delete(containerName);
    this.#endpoints.delete(containerName);
  }

  watch(onExit: (containerName: string, reason: ExitReason, detail: string) => void): Promise<() => void> {
    return watchWorkloadExits(this.#docker, onExit, {
      onOom: (name) => this.#ooms.set(name, Date.now()),
      onStale: (containerName, action) =>
        this.#log("info", "an engine event of a container its name no longer holds: not an exit", {
          containerName,
          action,
        }),
    });
  }
}
