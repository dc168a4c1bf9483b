import { join } from "node:path";
import type { Hono } from "hono";
import type { Admission } from "./lifecycle/admission.ts";
import { buildApp } from "./http/app.ts";
import { PostgresReplicaCluster } from "./cluster/postgres-replica-cluster.ts";
import { type ReplicaCluster, singleReplica } from "./cluster/replica-cluster.ts";
import type { ServerConfig } from "./config.ts";
import { offeredCredentialEnv } from "./lifecycle/credential-env.ts";
import { EgressGuard } from "./lifecycle/egress-guard.ts";
import { EventBus } from "./lifecycle/event-bus.ts";
import { type RunningHarness, startHarness } from "./harness-wiring.ts";
import { Lifecycle } from "./lifecycle/lifecycle.ts";
import { jsonLogger, type Logger } from "./observability/log.ts";
import { type ServerMetrics, startMetrics } from "./metrics-wiring.ts";
import { SessionSeries } from "./observability/session-series.ts";
import { NamespaceQuotas, sessionKey } from "./lifecycle/namespace-quotas.ts";
import { ProvisionRecorder } from "./lifecycle/provision-recorder.ts";
import { GatewayAccounting } from "./harness/gateway-accounting.ts";
import { RunnerHub } from "./runners/runner-hub.ts";
import { RuntimeApproval } from "./lifecycle/runtime-approval.ts";
import { SessionJournal } from "./lifecycle/session-journal.ts";
import { registerShippedRuntimes } from "./lifecycle/shipped-runtimes.ts";
import type { HarnessStore } from "./store/harness-store.ts";
import { openStores, type ServerStores } from "./store/open-stores.ts";
import type { Store } from "./store/store.ts";
import { WarmPools } from "./lifecycle/warm-pools.ts";
import { Workspaces } from "./lifecycle/workspaces.ts";
import { WorkspaceFilesRelay } from "./relay/workspace-files.ts";

/** What a caller (the CLI, a test) may set beyond the config: everything else the root builds. */
export type ServerOverrides = {
  /** @default JSON lines on stderr */
  log?: Logger;
  /**
   * Where Agent `secretRef` credentials are read: the environment offered to sessions.
   * @default the variables of process.env that `config.credentialEnv` lists (offeredCredentialEnv)
   */
  secretEnv?: Record<string, string | undefined>;
  /** Keep-alive comment interval of event streams. @default 15000 */
  keepAliveMs?: number;
};

/** Every service of one server process, each built once. */
export type ComposedServer = {
  config: ServerConfig;
  log: Logger;
  /**
   * The stores over the one connection they share: `<data-dir>/agent-sessions.db`, or PostgreSQL
   * when `config.databaseUrl` is set.
   */
  stores: ServerStores;
  /**
   * The other server replicas over the same database (PostgreSQL), or this process alone
   * (SQLite): shared locks, the controllers' lease, runner links, forwarded commands, frames.
   */
  cluster: ReplicaCluster;
  store: Store;
  harnessStore: HarnessStore;
  bus: EventBus;
  journal: SessionJournal;
  hub: RunnerHub;
  admission: Admission;
  /** The one Workspaces: RPCs, SendAgentMessage and HarnessSessions place through its lock. */
  workspaces: Workspaces;
  lifecycle: Lifecycle;
  warmPools: WarmPools;
  harness: RunningHarness;
  observability: ServerMetrics;
  /** The HTTP API (never listens; main.ts does). */
  app: Hono;
  /**
   * Ends event streams, stops controllers, closes runner links, runs `beforeDatabase` (main.ts
   * closes the listener there), closes the database. Idempotent.
   */
  close(beforeDatabase?: () => Promise<void>): Promise<void>;
};

/** Where the server keeps its SQLite file. */
export function databasePathOf(config: Pick<ServerConfig, "dataDir">): string {
  return join(config.dataDir, "agent-sessions.db");
}

/**
 * The composition root: the config, parsed once by the caller, in; every service of the server
 * built once, out. `startServer` (main.ts) listens on top of it; tests build through it too, with
 * overrides, so what they test is wired as production is.
 */
export async function composeServer(
  config: ServerConfig,
  overrides: ServerOverrides = {},
): Promise<ComposedServer> {
  const log = overrides.log ?? jsonLogger("server");
  const secretEnv = overrides.secretEnv ?? offeredCredentialEnv(config.credentialEnv, process.env);
  const stores = await openStores({
    sqlitePath: databasePathOf(config),
    databaseUrl: config.databaseUrl,
    frameBufferSize: config.frameBufferSize,
    onDatabaseError: (error) =>
      log("warn", "a pooled PostgreSQL connection failed", { error: error.message }),
  });
  const { store, harnessStore, tokenStore } = stores;
  const bus = new EventBus();
  let cluster: ReplicaCluster;
  try {
    cluster = stores.postgres
      ? await PostgresReplicaCluster.start({
          db: stores.postgres,
          log,
          listRunners: () => store.listRunners(),
          readFrames: (query) => store.readFrames(query),
          publish: (frame) => bus.publish(frame),
        })
      : singleReplica();
  } catch (error) {
    await stores.close();
    throw error;
  }
  const locks = cluster.locks;
  const admission: Admission = {
    egress: new EgressGuard({ serverPort: config.port, deny: config.egressDeny, allow: config.egressAllow }),
    runtimes: new RuntimeApproval({
      ...(config.approvedRegistries ? { registries: config.approvedRegistries } : {}),
      ...(config.approvedRuntimes ? { runtimes: config.approvedRuntimes } : {}),
      shippedImages: config.shippedImages,
    }),
    quotas: new NamespaceQuotas(config.namespaceQuotas),
  };
  // A namespace's sessions: its workspaces here, its HarnessSessions in the harness store (harness-wiring.ts).
  admission.quotas?.addSessionSource(async (namespace) =>
    (await store.listWorkspaces({ namespace })).map((w) => sessionKey(w.agent_ref, w.workstream)),
  );
  const journal = new SessionJournal(store, bus, cluster.frames);
  const hub = new RunnerHub({
    store,
    journal,
    adminToken: config.adminToken,
    runnerToken: config.runnerToken,
    heartbeatMs: config.heartbeatMs,
    reattachWindowMs: config.reattachWindowMs,
    commandTimeoutMs: config.commandTimeoutMs,
    maxRunnerCapacity: config.maxRunnerCapacity,
    registration: config.runnerRegistration,
    frameBudget: {
      framesPerSecond: config.sessionFramesPerSecond,
      bytesPerSecond: config.sessionFrameBytesPerSecond,
    },
    cluster,
    log,
  });
  const observability = startMetrics({ store, harnessStore, hub, log });
  // The runners' model gateways: their reports count into HarnessSession status and events.
  hub.onGatewayReport(new GatewayAccounting({ harness: harnessStore, store, journal, log }).take);
  const shutdown = new AbortController();
  let harness: RunningHarness | undefined;
  const closeAll = async (beforeDatabase?: () => Promise<void>) => {
    shutdown.abort();
    await harness?.close();
    await hub.close();
    await beforeDatabase?.();
    await cluster.close();
    await stores.close();
  };
  try {
    await registerShippedRuntimes(store, config.shippedImages, log);
    // Sessions of a previous run wait for their runners to reattach (or the window to close).
    await hub.recover();
    // AgentRuntime `spec.warmPool` → the runners' warm pools (runner/sessions/warm-pool.ts).
    const warmPools = new WarmPools({
      store,
      runners: hub,
      log,
      admission,
      secretEnv,
      leads: () => cluster.leads(),
    });
    // One Workspaces (one placement lock) for every path that creates a workspace; it records the
    // digest each provision resolved, which HarnessSession status reports.
    const digests = new ProvisionRecorder(hub);
    const workspaces = new Workspaces({
      store,
      runners: digests,
      journal,
      log,
      secretEnv,
      admission,
      warmPools,
      locks,
    });
    const lifecycle = new Lifecycle({
      store,
      runners: hub,
      journal,
      log,
      admission,
      secretEnv,
      warmPools,
      workspaces,
      locks,
    });
    warmPools.start();
    shutdown.signal.addEventListener("abort", () => warmPools.stop());
    harness = await startHarness({
      harnessStore,
      store,
      bus,
      journal,
      runners: hub,
      workspaces,
      digests,
      sessions: lifecycle.sessions,
      log,
      secretEnv,
      admission,
      requestTimeoutMs: config.requestTimeoutMs,
      requestsPerTokenMax: config.requestsPerTokenMax,
      requestsPerNamespaceMax: config.requestsPerNamespaceMax,
      requestBodyMaxBytes: config.requestBodyMaxBytes,
      replyMaxBytes: config.replyMaxBytes,
      idleCheckMs: config.idleCheckMs,
      agentRunsMax: config.agentRunsMax,
      autoResumeTimeoutMs: config.autoResumeTimeoutMs,
      restartPolicy: config.restartPolicy,
      snapshotArchiveMaxBytes: config.snapshotArchiveMaxBytes,
      webhooks: config.webhooks,
      onIdleSweep: (seconds) => observability.metrics.recordIdleSweep(seconds),
      cluster,
    });
    const metricsReader = harness.routes.metrics;
    if (config.sessionSeries.intervalMs > 0 && metricsReader) {
      const series = new SessionSeries({
        registry: observability.metrics.registry,
        list: async () => await harnessStore.listHarnessSessions(),
        read: (namespace, name) => metricsReader.read(namespace, name),
        ...config.sessionSeries,
        log,
      });
      series.start();
      shutdown.signal.addEventListener("abort", () => void series.stop());
    }
    // A runner attaching or undrained may take work that waits for one (Pending HarnessSessions).
    const placeWaiting = harness.resyncUnsettled;
    // The paused tier: an agent message or a files call wakes a Paused HarnessSession first.
    const wakeWorkspace = harness.wakeWorkspace;
    lifecycle.messages.wakePausedWith(wakeWorkspace);
    hub.onRunnerAttached((_runner, reported) => {
      placeWaiting();
      // The paused tier follows what the runner says its engine holds frozen (PROTOCOL.md §3).
      harness?.followRunner(reported);
    });
    const app = buildApp({
      store,
      bus,
      rpc: lifecycle.handlers,
      adminToken: config.adminToken,
      runnerToken: config.runnerToken,
      tokens: tokenStore,
      shutdown: shutdown.signal,
      log,
      admission,
      secretEnv,
      harness: harness.routes,
      harnessStore,
      workspaceFiles: new WorkspaceFilesRelay({
        harness: harnessStore,
        store,
        runners: hub,
        maxBytes: config.workspaceFileMaxBytes,
        wake: wakeWorkspace,
      }),
      runners: hub,
      runnerAdmin: { runners: hub, onPlacementChanged: placeWaiting },
      metrics: observability.metrics,
      metricsPublic: config.metricsPublic,
      ...(overrides.keepAliveMs !== undefined ? { keepAliveMs: overrides.keepAliveMs } : {}),
      jsonBodyMaxBytes: config.jsonBodyMaxBytes,
      maxEventSubscribers: config.maxEventSubscribers,
      eventSubscribersPerTokenMax: config.eventSubscribersPerTokenMax,
      eventSubscribersPerNamespaceMax: config.eventSubscribersPerNamespaceMax,
      eventQueueMaxBytes: config.eventQueueMaxBytes,
    });
    let closing: Promise<void> | undefined;
    return {
      config,
      log,
      stores,
      cluster,
      store,
      harnessStore,
      bus,
      journal,
      hub,
      admission,
      workspaces,
      lifecycle,
      warmPools,
      harness,
      observability,
      app,
      close: (beforeDatabase) => {
        closing ??= closeAll(beforeDatabase);
        return closing;
      },
    };
  } catch (error) {
    await closeAll();
    throw error;
  }
}
