import type { Server } from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { createAdaptorServer } from "@hono/node-server";
import type { Admission } from "./admission.ts";
import { buildApp } from "./app.ts";
import { parseConfig, type ServerConfig } from "./config.ts";
import { offeredCredentialEnv } from "./credential-env.ts";
import { EgressGuard } from "./egress-guard.ts";
import { EventBus } from "./event-bus.ts";
import { type RunningHarness, startHarness } from "./harness-wiring.ts";
import { Lifecycle } from "./lifecycle.ts";
import { jsonLogger, type Logger } from "./log.ts";
import { startMetrics } from "./metrics-wiring.ts";
import { NamespaceQuotas, sessionKey } from "./namespace-quotas.ts";
import { registerShippedRuntimes } from "./shipped-runtimes.ts";
import { RUNNER_CONNECT_PATH, RunnerHub } from "./runner-hub.ts";
import { issueRunnerCredential } from "./runner-identity.ts";
import { RuntimeApproval } from "./runtime-approval.ts";
import { SessionJournal } from "./session-journal.ts";
import { SqliteStore } from "./store/sqlite-store.ts";
import { WarmPools } from "./warm-pools.ts";

export type StartServerOptions = {
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

export type RunningServer = {
  /** `http://host:port` of the API. */
  url: string;
  /** `ws://host:port/v1/runners/connect`: where runners dial. */
  runnerUrl: string;
  config: ServerConfig;
  /**
   * Issue runner `name` a new credential (its older one stops working): how `serve` gives its
   * embedded runner an identity in process, with nothing written or typed.
   */
  issueRunnerCredential(name: string): Promise<string>;
  /** Stops accepting, closes runner links and event streams, closes the store. */
  close(): Promise<void>;
};

/**
 * Start the server in this process: store, RunnerHub, lifecycle, HTTP API and the runner
 * WebSocket on one port. Used by the CLI (`agent-sessions serve`) and by tests (port 0).
 */
export async function startServer(
  config: ServerConfig,
  options: StartServerOptions = {},
): Promise<RunningServer> {
  const log = options.log ?? jsonLogger("server");
  const secretEnv = options.secretEnv ?? offeredCredentialEnv(config.credentialEnv ?? [], process.env);
  const store = new SqliteStore(join(config.dataDir, "agent-sessions.db"), {
    frameBufferSize: config.frameBufferSize,
  });
  const bus = new EventBus();
  const admission: Admission = {
    egress: new EgressGuard({ serverPort: config.port, deny: config.egressDeny ?? [] }),
    runtimes: new RuntimeApproval({
      ...(config.approvedRegistries ? { registries: config.approvedRegistries } : {}),
      ...(config.approvedRuntimes ? { runtimes: config.approvedRuntimes } : {}),
      referenceImage: config.referenceImage,
      piImage: config.piImage,
      compassImage: config.compassImage,
      hermesImage: config.hermesImage,
    }),
    quotas: new NamespaceQuotas(config.namespaceQuotas ?? {}),
  };
  // A namespace's sessions: its workspaces here, its HarnessSessions in the harness store (harness-wiring.ts).
  admission.quotas?.addSessionSource(async (namespace) =>
    (await store.listWorkspaces({ namespace })).map((w) => sessionKey(w.agent_ref, w.workstream)),
  );
  const journal = new SessionJournal(store, bus);
  const hub = new RunnerHub({
    store,
    journal,
    adminToken: config.adminToken,
    runnerToken: config.runnerToken,
    heartbeatMs: config.heartbeatMs,
    reattachWindowMs: config.reattachWindowMs,
    commandTimeoutMs: config.commandTimeoutMs,
    ...(config.maxRunnerCapacity !== undefined ? { maxRunnerCapacity: config.maxRunnerCapacity } : {}),
    ...(config.runnerRegistration !== undefined ? { registration: config.runnerRegistration } : {}),
    frameBudget: {
      ...(config.sessionFramesPerSecond ? { framesPerSecond: config.sessionFramesPerSecond } : {}),
      ...(config.sessionFrameBytesPerSecond ? { bytesPerSecond: config.sessionFrameBytesPerSecond } : {}),
    },
    log,
  });
  const observability = startMetrics({
    store,
    hub,
    databasePath: join(config.dataDir, "agent-sessions.db"),
    log,
  });
  const shutdown = new AbortController();
  let server: Server | undefined;
  let harness: RunningHarness | undefined;
  try {
    await registerShippedRuntimes(
      store,
      {
        reference: config.referenceImage,
        pi: config.piImage,
        compass: config.compassImage,
        hermes: config.hermesImage,
      },
      log,
    );
    // Sessions of a previous run wait for their runners to reattach (or the window to close).
    await hub.recover();
    const lifecycleOptions: ConstructorParameters<typeof Lifecycle>[0] = {
      store,
      runners: hub,
      journal,
      log,
      admission,
    };
    lifecycleOptions.secretEnv = secretEnv;
    // AgentRuntime `spec.warmPool` → the runners' warm pools (runner/warm-pool.ts).
    const warmPools = new WarmPools({
      store,
      runners: hub,
      log,
      admission,
      ...(lifecycleOptions.secretEnv ? { secretEnv: lifecycleOptions.secretEnv } : {}),
    });
    lifecycleOptions.warmPools = warmPools;
    const lifecycle = new Lifecycle(lifecycleOptions);
    warmPools.start();
    shutdown.signal.addEventListener("abort", () => warmPools.stop());
    harness = await startHarness({
      databasePath: join(config.dataDir, "agent-sessions.db"),
      store,
      bus,
      journal,
      runners: hub,
      sessions: lifecycle.sessions,
      warmPools,
      log,
      secretEnv,
      admission,
      requestTimeoutMs: config.requestTimeoutMs,
      requestBodyMaxBytes: config.requestBodyMaxBytes,
      replyMaxBytes: config.replyMaxBytes,
      idleCheckMs: config.idleCheckMs,
      ...(config.agentRunsMax !== undefined ? { agentRunsMax: config.agentRunsMax } : {}),
      autoResumeTimeoutMs: config.autoResumeTimeoutMs,
      ...(config.restartPolicy ? { restartPolicy: config.restartPolicy } : {}),
      onIdleSweep: (seconds) => observability.metrics.recordIdleSweep(seconds),
    });
    const appOptions: Parameters<typeof buildApp>[0] = {
      store,
      bus,
      rpc: lifecycle.handlers,
      adminToken: config.adminToken,
      runnerToken: config.runnerToken,
      shutdown: shutdown.signal,
      log,
      admission,
    };
    if (options.keepAliveMs !== undefined) appOptions.keepAliveMs = options.keepAliveMs;
    if (config.jsonBodyMaxBytes !== undefined) appOptions.jsonBodyMaxBytes = config.jsonBodyMaxBytes;
    if (config.maxEventSubscribers !== undefined) appOptions.maxEventSubscribers = config.maxEventSubscribers;
    if (config.eventQueueMaxBytes !== undefined) appOptions.eventQueueMaxBytes = config.eventQueueMaxBytes;
    appOptions.harness = harness.routes;
    // A runner attaching or undrained may take work that waits for one (Pending HarnessSessions).
    const placeWaiting = harness.resyncUnsettled;
    hub.onRunnerAttached(placeWaiting);
    appOptions.runnerAdmin = { runners: hub, onPlacementChanged: placeWaiting };
    appOptions.metrics = observability.metrics;
    appOptions.metricsPublic = config.metricsPublic ?? false;
    const app = buildApp(appOptions);
    const listening = createAdaptorServer({
      fetch: app.fetch,
      hostname: config.host,
      port: config.port,
    }) as Server;
    server = listening;
    listening.on("upgrade", (request, socket, head) => hub.handleUpgrade(request, socket, head));
    await new Promise<void>((resolve, reject) => {
      listening.once("error", reject);
      listening.listen(config.port, config.host, () => {
        listening.off("error", reject);
        resolve();
      });
    });
  } catch (error) {
    await harness?.close();
    await hub.close();
    await observability.close();
    await store.close();
    throw error;
  }

  const address = server.address() as AddressInfo;
  // Asked for port 0: the port it got is the one sessions must not reach.
  admission.egress.addServerPort(address.port);
  const host = address.family === "IPv6" ? `[${address.address}]` : address.address;
  const url = `http://${host}:${address.port}`;
  log("info", "server listening", { url, data_dir: config.dataDir });
  let closing: Promise<void> | undefined;
  const open = server;
  return {
    url,
    runnerUrl: `ws://${host}:${address.port}${RUNNER_CONNECT_PATH}`,
    config,
    issueRunnerCredential: async (name) => {
      const issued = await issueRunnerCredential(store, name);
      hub.closeLinksOf(name, issued.tokenHash);
      return issued.credential;
    },
    close: () => {
      closing ??= (async () => {
        shutdown.abort();
        await harness?.close();
        await hub.close();
        const closed = new Promise<void>((resolve) => open.close(() => resolve()));
        open.closeAllConnections();
        await closed;
        await observability.close();
        await store.close();
      })();
      return closing;
    },
  };
}

/** `node proxy/main.ts`: the server alone, configured from the environment. */
async function main(): Promise<void> {
  const config = parseConfig();
  const running = await startServer(config);
  process.stderr.write(
    `agent-sessions server on ${running.url}; admin token: ${process.env.AGENT_SESSIONS_TOKEN ? "$AGENT_SESSIONS_TOKEN" : join(config.dataDir, "admin-token")}\n`,
  );
  const stop = (signal: string) => {
    process.stderr.write(`${signal}: shutting down\n`);
    running.close().then(
      () => process.exit(0),
      (error: unknown) => {
        process.stderr.write(`shutdown failed: ${String(error)}\n`);
        process.exit(1);
      },
    );
  };
  process.once("SIGINT", () => stop("SIGINT"));
  process.once("SIGTERM", () => stop("SIGTERM"));
}

if (import.meta.main) {
  main().catch((error: unknown) => {
    process.stderr.write(`${error instanceof Error ? error.message : String(error)}\n`);
    process.exit(1);
  });
}
