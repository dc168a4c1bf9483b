/**
 * A runner: the link to the server, the engine driver, and the authoritative set of agent
 * sessions. Owns every container and stack operation; the server only asks.
 */
import type { McpToolCallReport } from "./gateway/mcp-forwarder.ts";
import { KeyedMutex } from "../contracts/keyed-mutex.ts";
import { join } from "node:path";
import { CodedError } from "../contracts/errors.ts";
import { jsonLogger, type Logger } from "../contracts/log.ts";
import type { InProcessDial } from "../contracts/runner-channel.ts";
import {
  type GatewayRefusal,
  RUNNER_PROTOCOL_VERSION,
  type RunnerCommand,
} from "../contracts/runner-protocol.ts";
import { probeAdapter } from "./engine/adapter-probe.ts";
import { PAUSED_WORKLOADS_FILE_NAME, PausedWorkloads } from "./engine/paused-workloads.ts";
import { AgentSessions } from "./sessions/agent-sessions.ts";
import type { RunnerConfig } from "./config.ts";
import type { EngineDriver } from "./engine/driver.ts";
import { RunnerLink } from "./link/link.ts";
import { type RelayTarget, Relays } from "./relay/relay.ts";
import { type PortSink, PortRelays } from "./relay/port-relay.ts";
import { CREDENTIAL_FILE_NAME } from "./link/credential.ts";
import { SESSION_FILE_NAME, SessionFile } from "./sessions/session-file.ts";
import { WARM_POOL_FILE_NAME, WarmPool } from "./sessions/warm-pool.ts";
import { type ChunkSink, WorkspaceCommands } from "./relay/workspace-commands.ts";
import { BinaryKind, encodeBinaryFrame } from "../contracts/runner-binary.ts";
import { SnapshotCommands } from "./relay/snapshot-commands.ts";
import { SnapshotGate } from "./relay/snapshot-gate.ts";
import { SessionLogRing } from "./sessions/session-log-ring.ts";
import { redactLine } from "./sessions/log-redaction.ts";
import type { LogLine } from "../contracts/session-logs.ts";
import type { Usage } from "../contracts/adapter.ts";
import { GATEWAY_BUDGETS_FILE_NAME } from "./gateway/budgets.ts";
import { type Gateway, startGateway } from "./gateway/gateway.ts";
import { GatewayRoutes, type GatewayRoute } from "./gateway/routes.ts";
import { runRouteKey, SessionGateway } from "./gateway/session-gateway.ts";
import { GATEWAY_PORT_FILE_NAME, keptGatewayPort, keepGatewayPort } from "./gateway/gateway-port.ts";

/** Bytes toward the server (socket buffer + offline queue) above which agents' output is not read. */
const OUTPUT_HIGH_WATER_BYTES = 1024 * 1024;

/** The runner's logger: the one `Logger` (contracts/log.ts). */
export type Log = Logger;
export const jsonLog = jsonLogger;

export type RunnerOptions = {
  /** Asks an adapter whether it takes requests (`probe`), on `path`. @default probeAdapter (GET /readyz) */
  probeAdapter?: (endpoint: string, path?: string) => Promise<void>;
  /**
   * Dial the server in process instead of over a WebSocket to `serverUrl` (`serve`'s embedded
   * runner; contracts/runner-channel.ts). @default undefined (the WebSocket)
   */
  dial?: InProcessDial;
};

export class Runner {
  readonly link: RunnerLink;
  readonly sessions: AgentSessions;
  readonly #driver: EngineDriver;
  /** Each session's agent stderr and endings, for its logs (issue 42). */
  readonly #logs = new SessionLogRing();
  readonly #log: Log;
  readonly #relays = new Relays();
  readonly #ports = new PortRelays();
  /**
   * Adapter tokens by workspace, from the provision command (the runner holds them, never
   * clients); after a restart of this process, read back from the workspace's stack once
   * (`#tokenOf`), so the workspaces it provisioned before are served again without a new provision.
   */
  readonly #tokens = new Map<string, string>();
  /** The commit each workspace's seed fetched in this process (the provision's `seeded_commit`). */
  readonly #seededCommits = new Map<string, string>();
  /** Token look-ups in the stacks under way, one per workspace. */
  readonly #tokenLookups = new Map<string, Promise<string | undefined>>();
  /** The session set survives a restart of this process (runner/sessions/session-file.ts). */
  readonly #sessionFile: SessionFile;
  /** Workspaces provisioned ahead (runner/sessions/warm-pool.ts), as the server's `warm_pools` asks. */
  readonly #pool: WarmPool;
  /** The `workspace_*` commands (uploads staged under `<data-dir>/uploads`). */
  readonly #workspace: WorkspaceCommands;
  /** Relays wait while a snapshot of their workspace is taken (runner/relay/snapshot-gate.ts). */
  readonly #snapshotGate = new SnapshotGate();
  /** The `snapshot_*` commands (imports staged under `<data-dir>/snapshot-uploads`). */
  readonly #snapshots: SnapshotCommands;
  /**
   * Provision, scale_down and remove of one workspace, one at a time, in arrival order: the server
   * may stop waiting for a provision and send `remove` while it still runs here; run side by side,
   * the remove would find nothing yet and the late provision leave a workload running (issue 34
   * item 11a). In order, the remove takes down what the provision made.
   */
  readonly #operations = new KeyedMutex();
  /** The workloads this runner froze (the paused tier): thawed before anything needs them alive. */
  readonly #paused: PausedWorkloads;
  #unwatch: (() => void) | undefined;
  /** The Agents' credential values, by workspace and run (runner/gateway/routes.ts). */
  readonly #routes: GatewayRoutes;
  /** What sessions get instead of credentials; set by `start` (the gateway listens then). */
  #gateway = new SessionGateway(new GatewayRoutes(), undefined, "the runner has not started");
  /** Relayed requests in flight, by workspace: a model call is put on the request when it is the only one. */
  readonly #inFlight = new Map<string, Set<string>>();
  /** What the gateway counted for each one-shot run in progress. */
  readonly #runUsage = new Map<string, { input: number; output: number; calls: number; reported: number }>();
  readonly #config: RunnerConfig;
  readonly #probeAdapter: (endpoint: string, path?: string) => Promise<void>;

  constructor(
    config: RunnerConfig,
    driver: EngineDriver,
    log: Log = jsonLog("runner"),
    options: RunnerOptions = {},
  ) {
    this.#driver = driver;
    this.#config = config;
    this.#routes = new GatewayRoutes({ file: join(config.dataDir, "gateway-routes.json") });
    this.#probeAdapter =
      options.probeAdapter ?? ((endpoint, path) => probeAdapter(endpoint, undefined, path));
    this.#log = log;
    this.#workspace = new WorkspaceCommands(
      driver.workspace,
      join(config.dataDir, "uploads"),
      config.uploads,
    );
    this.#snapshots = new SnapshotCommands(
      driver.snapshots,
      this.#snapshotGate,
      join(config.dataDir, "snapshot-uploads"),
      config.uploads,
    );
    this.#sessionFile = new SessionFile(join(config.dataDir, SESSION_FILE_NAME));
    this.#paused = new PausedWorkloads(driver, {
      file: join(config.dataDir, PAUSED_WORKLOADS_FILE_NAME),
      budgetBytes: config.pausedMemoryMaxBytes,
    });
    this.sessions = new AgentSessions(
      driver,
      {
        frame: (session_id, frame) =>
          this.link.send({ version: RUNNER_PROTOCOL_VERSION, type: "frame", payload: { session_id, frame } }),
        state: (session_id, state, reason) =>
          this.link.send({
            version: RUNNER_PROTOCOL_VERSION,
            type: "session_state",
            payload: { session_id, state, ...(reason ? { reason } : {}) },
          }),
        changed: () => {
          try {
            this.#sessionFile.save(this.sessions.saved());
          } catch (error) {
            this.#log("error", "saving the session set failed", { error: String(error) });
          }
        },
      },
      {
        limits: config.agentOutput,
        // Agents wait while the way to the server is backed up (a slow server, a lost link).
        congested: () => this.link.backlog > OUTPUT_HIGH_WATER_BYTES,
        log,
        logs: this.#logs,
      },
    );
    this.#pool = new WarmPool({
      // Warm entries get gateway tokens too, never the Agent's credentials.
      driver: {
        provision: (containerName, spec, secrets) => {
          const s = this.#gateway.forWorkspace(containerName, spec, secrets.credentials, secrets.gateway);
          return driver.provision(containerName, s.spec, {
            credentials: s.credentials,
            adapterToken: secrets.adapterToken,
            repoCredentials: s.repoCredentials,
          });
        },
        remove: async (containerName) => {
          await driver.remove(containerName);
          this.#gateway.forget(containerName);
        },
      },
      agents: this.sessions,
      log,
      stateFile: join(config.dataDir, WARM_POOL_FILE_NAME),
    });
    this.link = new RunnerLink(
      {
        serverUrl: config.serverUrl,
        token: config.token,
        credentialFile: join(config.dataDir, CREDENTIAL_FILE_NAME),
        name: config.name,
        engine: config.engine,
        capacity: config.capacity,
        labels: config.labels,
        dial: options.dial,
      },
      {
        // Each session with whether its workload is frozen now (the server follows it on attach).
        sessions: () =>
          this.sessions.report().map((s) => ({ ...s, paused: this.#paused.has(s.container_name) })),
        command: (c, signal, bulk) => this.#run(c, signal, bulk),
        log,
      },
    );
  }

  async start(): Promise<void> {
    await this.#startGateway();
    this.#unwatch = await this.#driver.watch((containerName, reason, detail) => {
      // A warning only when a live agent lost its workload; the runner's own removals (a stop,
      // a delete, its short-lived copy and git containers) are routine.
      const errored = this.sessions.workloadExited(containerName, reason, detail);
      this.#log(errored > 0 ? "warn" : "debug", "workload exited", {
        containerName,
        reason,
        detail,
        errored,
      });
    });
    // No workload stays above its declared CPU limit past a restart (runner/docker/startup-boost.ts).
    const reset = (await this.#driver.resetBoosts?.()) ?? [];
    if (reset.length > 0)
      this.#log("info", "workloads boosted before the restart put back to their declared CPU", { reset });
    const saved = this.#sessionFile.load();
    // The engine says which workloads are frozen (this runner's previous process froze them):
    // they stay frozen, counted in the paused budget, and the first hello reports them paused, so
    // the server shows what the engine holds (PROTOCOL.md §5).
    const frozen = await this.#paused.adopt(saved.map((s) => s.container_name));
    if (frozen.length > 0) this.#log("info", "workloads paused before the restart kept paused", { frozen });
    // Before the first hello, so it reports the agents started again (PROTOCOL.md §5). Docker
    // refuses an exec in a frozen container: one is thawed for its agent's start, then frozen again.
    if (saved.length > 0) {
      const failed = await this.sessions.restore(saved, (containerName, start) =>
        this.#paused.whileThawed(containerName, start),
      );
      this.#log("info", "session set restored", { saved: saved.length, failed });
      // Read the restored workspaces' tokens back ahead of the first request (in the background).
      for (const s of this.sessions.report())
        if (s.state === "READY")
          this.#tokenOf(s.container_name).catch((error: unknown) =>
            this.#log("warn", "reading a workspace's adapter token back failed", {
              container_name: s.container_name,
              error: String(error),
            }),
          );
    }
    this.#recordInterrupted();
    this.#pool.start();
    this.link.start();
  }

  /**
   * A previous process of this runner died while a fast path's recording ran: the stack of that
   * workspace records the engine's state again (in the background, each under the workspace's
   * operation lock, so a command for it comes after; runner/engine/fast-path.ts).
   */
  #recordInterrupted(): void {
    const driver = this.#driver;
    const record = driver.recordEngineState?.bind(driver);
    if (!record) return;
    for (const containerName of driver.interruptedRecordings?.() ?? [])
      void this.#operations
        .run(containerName, () => record(containerName))
        .then(
          () =>
            this.#log("info", "recorded the engine's state of an interrupted recording", { containerName }),
          (error: unknown) =>
            this.#log("warn", "recording the engine's state of an interrupted recording failed", {
              containerName,
              error: String((error as Error).message ?? error).slice(0, 500),
            }),
        );
  }

  stop(): void {
    void this.#gateway.gateway?.close();
    this.link.close();
    this.#pool.stop();
    this.#workspace.close();
    this.#snapshots.close();
    this.#unwatch?.();
  }

  /**
   * `signal` aborts past the command's deadline or on the server's cancel (runner/link/
   * running-commands.ts): the workspace reads, listings and relays stop on it; engine operations
   * (provision, scale_down, remove) run to their end, since a Pulumi update stopped midway leaves
   * its stack locked and half applied.
   */
  async #run(command: RunnerCommand, signal: AbortSignal, bulk?: Buffer): Promise<Record<string, unknown>> {
    const started = Date.now();
    try {
      const result = await this.#dispatch(command, signal, bulk);
      // `warm_pools` comes every few seconds and changes nothing most times: not logged. A
      // relayed request is audited by the server, one line each: here only when it failed.
      // Port traffic (issue 40) likewise: the server audits it.
      if (command.kind !== "warm_pools" && command.kind !== "relay" && !command.kind.startsWith("port_"))
        this.#log("info", "command done", { kind: command.kind, ms: Date.now() - started });
      return result;
    } catch (error) {
      // Errors answered to the server are secret-free (contracts/errors.ts): logged as answered.
      this.#log("warn", "command failed", {
        kind: command.kind,
        ms: Date.now() - started,
        code: (error as { code?: unknown }).code,
        // Its head and its tail: a CLI's failure (pulumi) says what went wrong at the end.
        error: headAndTail(String((error as Error).message ?? error)),
      });
      throw error;
    }
  }

  /** The workload a command needs alive (thawed first when this runner froze it), if any. */
  #workloadOf(command: RunnerCommand): string | undefined {
    switch (command.kind) {
      case "stop":
      case "send":
        return this.sessions.report().find((s) => s.session_id === command.session_id)?.container_name;
      case "pause":
      case "paused_memory":
      case "unpause":
      case "warm_pools":
      case "claim_warm":
      case "run_once":
      case "cancel_relay":
      // A paused workload stays frozen while its volume is copied; the others act on storage only.
      case "snapshot_take":
      case "snapshot_delete":
      case "snapshot_read":
      case "snapshot_write":
      case "snapshot_restore":
      case "snapshot_restore_prepare":
      // An observation: a frozen workload is measured as it is (no CPU, its memory kept).
      case "session_metrics":
      // A port socket's messages: its workload was thawed when it opened.
      case "port_socket_send":
      case "port_socket_close":
      case "session_logs":
        return undefined;
      default:
        return command.container_name;
    }
  }

  /**
   * Where a download's pieces go: binary frames of `relayId` when the server takes them
   * (PROTOCOL.md §9), else base64 `relay_chunk`s; paced by the link's buffer either way.
   */
  #chunksOf(relayId: string): ChunkSink {
    return {
      chunk: (data: Buffer, done: boolean) => {
        if (
          this.link.binary &&
          this.link.sendBinary(encodeBinaryFrame(BinaryKind.relayChunk, relayId, data, done))
        )
          return;
        this.link.send({
          version: RUNNER_PROTOCOL_VERSION,
          type: "relay_chunk",
          payload: { relay_id: relayId, data: data.toString("base64"), done },
        });
      },
      buffered: () => this.link.bufferedAmount,
    };
  }

  /**
   * Where a port relay's reply goes (issue 40): its head and socket messages as `relay_chunk`
   * envelopes, body bytes like a download's (#chunksOf).
   */
  #portSink(relayId: string): PortSink {
    const bytes = this.#chunksOf(relayId);
    const envelope = (payload: Record<string, unknown>) =>
      this.link.send({
        version: RUNNER_PROTOCOL_VERSION,
        type: "relay_chunk",
        payload: { relay_id: relayId, data: "", done: false, ...payload },
      });
    return {
      head: (status, headers) => envelope({ status, headers }),
      bytes: (data, done) => bytes.chunk(data, done),
      message: (message, data) => envelope({ message, data: data.toString("base64") }),
      buffered: bytes.buffered,
    };
  }

  /** `bulk`: an upload piece's bytes that came in a binary frame (PROTOCOL.md §9). */
  async #dispatch(
    command: RunnerCommand,
    signal: AbortSignal,
    bulk?: Buffer,
  ): Promise<Record<string, unknown>> {
    const frozen = this.#workloadOf(command);
    if (frozen !== undefined && (await this.#paused.thaw(frozen)))
      this.#log("info", "paused workload thawed", { container_name: frozen, for: command.kind });
    switch (command.kind) {
      case "provision": {
        this.#tokenLookups.delete(command.container_name);
        this.#tokens.set(command.container_name, command.adapter_token);
        this.#ports.declare(command.container_name, command.spec.ports);
        // Never shown in its logs: what the workspace is given to keep secret.
        this.#logs.setSecrets(command.container_name, [
          command.adapter_token,
          ...Object.values(command.credentials),
        ]);
        const r = await this.#operations.run(command.container_name, async () => {
          await this.#paused.thaw(command.container_name); // a pause queued ahead of it
          const s = this.#gateway.forWorkspace(
            command.container_name,
            command.spec,
            command.credentials,
            command.gateway,
            command.mcp,
          );
          return this.#driver.provision(command.container_name, s.spec, {
            credentials: s.credentials,
            adapterToken: command.adapter_token,
            repoCredentials: s.repoCredentials,
          });
        });
        // Kept while this process lives: a provision whose answer the server never took (it timed
        // out) seeded the checkout, and the next one fetches nothing, so it says the commit again.
        if (r.seededCommit) this.#seededCommits.set(command.container_name, r.seededCommit);
        const seeded = r.seededCommit ?? this.#seededCommits.get(command.container_name);
        return {
          container_name: r.containerName,
          endpoint: r.endpoint,
          resolved_image_digest: r.resolvedImageDigest,
          ...(seeded ? { seeded_commit: seeded } : {}),
          ...(r.seededSnapshot ? { seeded_snapshot: r.seededSnapshot } : {}),
        };
      }
      case "start":
        if (this.#pool.isUnclaimed(command.container_name))
          throw new CodedError(
            "FAILED_PRECONDITION",
            `workspace ${command.container_name} is an unclaimed warm-pool entry`,
          );
        return {
          state: await this.sessions.start(
            command.session_id,
            command.container_name,
            command.command,
            command.mode,
          ),
        };
      case "stop":
        return { state: await this.sessions.stop(command.session_id) };
      case "send":
        this.sessions.send(command.session_id, command.line);
        return {};
      case "scale_down":
        await this.#operations.run(command.container_name, async () => {
          await this.#paused.thaw(command.container_name); // a pause queued ahead of it
          await this.sessions.stopWorkspace(command.container_name);
          await this.#driver.scaleDown(command.container_name);
          // Its gateway tokens are refused while it is stopped; the resume's provision takes them up again.
          this.#gateway.suspend(command.container_name);
        });
        return { container_name: command.container_name };
      case "pause":
        // Answered once frozen: the memory read (up to a second on Docker) is `paused_memory`'s.
        await this.#operations.run(command.container_name, () => this.#paused.pause(command.container_name));
        return { paused: true };
      case "paused_memory": {
        // Not under the workload's operation lock: a read, which nothing after it waits for.
        const r = await this.#paused.memory(command.container_name);
        return { ...(r.memoryBytes !== undefined ? { memory_bytes: r.memoryBytes } : {}), evict: r.evict };
      }
      case "unpause":
        return { unpaused: await this.#paused.thaw(command.container_name) };
      case "remove":
        // After a provision still running here (the server may have stopped waiting for it).
        await this.#operations.run(command.container_name, async () => {
          await this.#paused.thaw(command.container_name); // a pause queued ahead of it
          await this.sessions.stopWorkspace(command.container_name);
          await this.#driver.remove(command.container_name);
          this.#gateway.forget(command.container_name);
        });
        this.sessions.forgetWorkspace(command.container_name);
        this.#tokens.delete(command.container_name);
        this.#seededCommits.delete(command.container_name);
        this.#logs.forget(command.container_name);
        return { container_name: command.container_name, removed: true };
      case "relay": {
        // Waits while a snapshot of the workspace is taken; counted in flight from here.
        const leave = await this.#snapshotGate.enter(command.container_name, signal);
        let target: RelayTarget;
        try {
          target = await this.#relayTarget(command.container_name, command.protocol);
        } catch (error) {
          leave();
          throw error;
        }
        const relayId = command.relay_id;
        // The server stopped waiting: the adapter stops working on it too.
        signal.addEventListener("abort", () => void this.#relays.cancel(relayId).catch(() => {}), {
          once: true,
        });
        const inFlight = this.#inFlight.get(command.container_name) ?? new Set<string>();
        this.#inFlight.set(command.container_name, inFlight.add(relayId));
        return this.#relays
          .relay(
            relayId,
            target,
            command.request,
            command.timeout_ms,
            {
              chunk: (data, done, status) =>
                this.link.send({
                  version: RUNNER_PROTOCOL_VERSION,
                  type: "relay_chunk",
                  payload: { relay_id: relayId, data, done, ...(status !== undefined ? { status } : {}) },
                }),
              buffered: () => this.link.bufferedAmount,
            },
            command.reply_max_bytes,
          )
          .then((answered) => {
            // The harness answered (not an adapter still loading): its startup boost ends.
            if (answered.status < 500) this.#driver.firstAnswered?.(command.container_name);
            return answered;
          })
          .finally(() => {
            leave();
            inFlight.delete(relayId);
            if (inFlight.size === 0 && this.#inFlight.get(command.container_name) === inFlight)
              this.#inFlight.delete(command.container_name);
          });
      }
      case "probe": {
        const { endpoint } = await this.#relayTarget(command.container_name);
        // An openai-chat harness answers `GET /healthz` (contracts/session-spec.ts SessionProtocol).
        await this.#probeAdapter(endpoint, command.protocol === "openai-chat" ? "/healthz" : undefined);
        return { endpoint };
      }
      case "cancel_relay":
        return { cancelled: await this.#relays.cancel(command.relay_id) };
      case "warm_pools":
        return { ready: this.#pool.configure(command.pools) };
      case "claim_warm": {
        const entry = this.#pool.claim(command.pool, command.fingerprint);
        this.#tokens.set(entry.containerName, entry.adapterToken);
        this.#ports.declare(entry.containerName, entry.spec.ports);
        return {
          container_name: entry.containerName,
          spec: entry.spec,
          adapter_token: entry.adapterToken,
          endpoint: entry.endpoint,
          resolved_image_digest: entry.resolvedImageDigest,
        };
      }
      case "run_once": {
        if (!this.#driver.runOnce)
          throw new CodedError("UNIMPLEMENTED", `the ${this.#driver.engine} driver has no one-shot runs`);
        const key = runRouteKey(command.run_id);
        const counted = { input: 0, output: 0, calls: 0, reported: 0 };
        this.#runUsage.set(key, counted);
        try {
          const outcome = await this.#driver.runOnce(this.#gateway.forRun(command));
          return { ...outcome, gateway_usage: runUsage(counted) };
        } finally {
          this.#gateway.forget(key);
          this.#runUsage.delete(key);
        }
      }
      case "workspace_list":
        return this.#workspace.list(command, signal);
      case "workspace_read":
        return this.#workspace.read(command, this.#chunksOf(command.relay_id), signal);
      case "workspace_write":
        return this.#workspace.write(command, bulk);
      case "workspace_delete":
        return this.#workspace.delete(command);
      case "snapshot_take":
        // After a provision, stop or remove of the workspace under way; never beside one.
        return this.#operations.run(command.container_name, () => this.#snapshots.take(command, signal));
      case "snapshot_delete":
        return this.#snapshots.delete(command);
      case "snapshot_read":
        return this.#snapshots.read(command, this.#chunksOf(command.relay_id), signal);
      case "snapshot_write":
        return this.#snapshots.write(command, bulk);
      case "snapshot_restore":
        return this.#operations.run(command.container_name, () => this.#snapshots.restore(command));
      case "snapshot_restore_prepare":
        // Beside the stop under way (not after it): it only starts what the restore will use.
        return this.#snapshots.prepareRestore(command);
      case "session_metrics":
        return { metrics: await this.#driver.metrics(command.container_name, signal) };
      case "port_request": {
        const { endpoint } = await this.#relayTarget(command.container_name);
        const address = this.#ports.target(command.container_name, endpoint, command.port);
        return this.#ports.request(address, command, this.#portSink(command.relay_id), signal);
      }
      case "port_socket": {
        const { endpoint } = await this.#relayTarget(command.container_name);
        const address = this.#ports.target(command.container_name, endpoint, command.port);
        return this.#ports.socket(address, command, this.#portSink(command.relay_id), signal);
      }
      case "port_socket_send":
        await this.#ports.send(command.relay_id, command.message, Buffer.from(command.data, "base64"));
        return {};
      case "port_socket_close":
        return { closed: this.#ports.close(command.relay_id, command.code, command.reason) };
      case "session_logs":
        return this.#sessionLogs(command.container_name, command.tail_lines, command.since_time);
      default: {
        const never: never = command;
        throw new CodedError("INVALID_ARGUMENT", `unknown command ${JSON.stringify(never)}`);
      }
    }
  }

  /**
   * A session's logs: the workload's output as the engine keeps it (redacted here: the engine
   * keeps it as written) and the ring of its agent's stderr, merged by time, the last `tailLines`.
   */
  async #sessionLogs(
    containerName: string,
    tailLines: number,
    sinceTime: string | undefined,
  ): Promise<{ lines: LogLine[]; truncated: boolean }> {
    const secrets = this.#logs.secretsOf(containerName);
    const workload = (
      (await this.#driver.workloadLogs?.(containerName, { tailLines, sinceTime }).catch((error: unknown) => {
        this.#log("warn", "reading a workload's logs failed", { containerName, error: String(error) });
        return [];
      })) ?? []
    ).map((l) => ({ ...l, line: redactLine(l.line, secrets) }));
    const ring = this.#logs.read(containerName, sinceTime);
    const merged = [...workload, ...ring.lines].sort((a, b) => (a.ts < b.ts ? -1 : a.ts > b.ts ? 1 : 0));
    const tail = merged.slice(Math.max(0, merged.length - tailLines));
    return { lines: tail, truncated: ring.dropped || tail.length < merged.length };
  }

  /**
   * Starts the model gateway where sessions reach it (AGENT_SESSIONS_GATEWAY_ADDRESS, on Docker
   * the bridge by default), on the port it had before when it had one: running sessions keep
   * their gateway URL across a restart of the runner.
   */
  async #startGateway(): Promise<void> {
    const { host, port } = this.#config.gateway;
    if (host === undefined) {
      this.#gateway = new SessionGateway(
        this.#routes,
        undefined,
        "set AGENT_SESSIONS_GATEWAY_ADDRESS to host:port, an address of this runner that session pods reach",
      );
      this.#log("warn", "no model gateway: sessions of an Agent with a model cannot be provisioned", {
        setting: "AGENT_SESSIONS_GATEWAY_ADDRESS",
      });
      return;
    }
    const portFile = join(this.#config.dataDir, GATEWAY_PORT_FILE_NAME);
    const budgetsFile = join(this.#config.dataDir, GATEWAY_BUDGETS_FILE_NAME);
    const kept = port === 0 ? keptGatewayPort(portFile, host) : undefined;
    const events = {
      onUsage: (route: GatewayRoute, report: { model: string; usage: Usage }) => this.#onUsage(route, report),
      onRefused: (route: GatewayRoute, refusal: { reason: GatewayRefusalReason; message: string }) => {
        if (route.key.startsWith("run:") || !route.grant) return;
        this.link.send({
          version: RUNNER_PROTOCOL_VERSION,
          type: "gateway_refused",
          payload: { container_name: route.key, agent: route.grant.agent, ...refusal },
        });
      },
      onToolCall: (route: GatewayRoute, call: McpToolCallReport) => {
        if (route.key.startsWith("run:")) return;
        this.link.send({
          version: RUNNER_PROTOCOL_VERSION,
          type: "gateway_tool_call",
          payload: { container_name: route.key, agent: route.grant?.agent ?? "", ...call },
        });
      },
    };
    let gateway: Gateway;
    try {
      gateway = await startGateway({ host, port: kept ?? port, routes: this.#routes, events, budgetsFile });
    } catch (error) {
      if (kept === undefined) throw error;
      // The port it had is taken now: a new one (sessions running since before get new tokens and URL when provisioned again).
      this.#log("warn", "the model gateway's previous port is taken; listening on another", {
        port: kept,
        error: String(error),
      });
      gateway = await startGateway({ host, port: 0, routes: this.#routes, events, budgetsFile });
    }
    if (port === 0) keepGatewayPort(portFile, host, gateway.port);
    this.#gateway = new SessionGateway(this.#routes, gateway);
    this.#log("info", "model gateway listening", { address: `${gateway.host}:${gateway.port}` });
  }

  /** A model call through the gateway: on the one-shot run's count, or reported for the session. */
  #onUsage(route: GatewayRoute, report: { model: string; usage: Usage }): void {
    const run = this.#runUsage.get(route.key);
    if (run) {
      run.calls += 1;
      if (report.usage !== "unavailable") {
        run.reported += 1;
        run.input += report.usage.input_tokens;
        run.output += report.usage.output_tokens;
      }
      return;
    }
    if (route.key.startsWith("run:") || !route.grant) return;
    const inFlight = this.#inFlight.get(route.key);
    const only = inFlight?.size === 1 ? [...inFlight][0] : undefined;
    this.link.send({
      version: RUNNER_PROTOCOL_VERSION,
      type: "gateway_usage",
      payload: {
        container_name: route.key,
        ...(only ? { relay_id: only } : {}),
        agent: route.grant.agent,
        model: report.model,
        usage: report.usage,
      },
    });
  }

  /** Where a relayed request goes: the adapter's endpoint, the token it wants, the protocol it speaks. */
  async #relayTarget(containerName: string, protocol?: "openai-chat"): Promise<RelayTarget> {
    const token = await this.#tokenOf(containerName);
    if (!token)
      throw new CodedError(
        "FAILED_PRECONDITION",
        `workspace ${containerName} was not provisioned by this runner`,
      );
    const endpoint = await this.#driver.endpoint(containerName);
    if (!endpoint) throw new CodedError("FAILED_PRECONDITION", `workspace ${containerName} is not running`);
    return { endpoint, token, ...(protocol ? { protocol } : {}) };
  }

  /** The workspace's adapter token: the one it was provisioned with, else its stack's (read once). */
  async #tokenOf(containerName: string): Promise<string | undefined> {
    const known = this.#tokens.get(containerName);
    if (known) return known;
    let lookup = this.#tokenLookups.get(containerName);
    if (!lookup) {
      lookup = this.#driver.adapterToken(containerName);
      this.#tokenLookups.set(containerName, lookup);
      // A failed look-up is tried again by the next request; a found token is kept.
      lookup.then(
        (token) => {
          if (this.#tokenLookups.get(containerName) !== lookup) return;
          this.#tokenLookups.delete(containerName);
          if (token && !this.#tokens.has(containerName)) this.#tokens.set(containerName, token);
        },
        () => {
          if (this.#tokenLookups.get(containerName) === lookup) this.#tokenLookups.delete(containerName);
        },
      );
    }
    return lookup;
  }
}

type GatewayRefusalReason = GatewayRefusal["reason"];

/** A run's usage as the gateway counted it: "unavailable" when it made calls none of which reported any. */
function runUsage(counted: { input: number; output: number; calls: number; reported: number }): Usage {
  if (counted.calls > 0 && counted.reported === 0) return "unavailable";
  return { input_tokens: counted.input, output_tokens: counted.output };
}

/** A long message's first 300 and last 700 characters (all of it when shorter than 1,000). */
function headAndTail(message: string): string {
  return message.length <= 1_000 ? message : `${message.slice(0, 300)} … ${message.slice(-700)}`;
}
