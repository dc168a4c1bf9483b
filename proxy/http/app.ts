import { Hono } from "hono";
import { bodyLimit } from "hono/body-limit";
import { requestId } from "hono/request-id";
import { formatScope, type WhoAmI } from "../../contracts/access.ts";
import { CodedError } from "../../contracts/errors.ts";
import { accessLog } from "./access-log.ts";
import { type Admission, defaultAdmission } from "../lifecycle/admission.ts";
import { type Audit, createAudit } from "../observability/audit.ts";
import { ApiTokens } from "./api-tokens.ts";
import { authenticate } from "./auth.ts";
import { sessionLabels, sessionVisibility } from "./event-access.ts";
import { toErrorResponse } from "./error-response.ts";
import type { EventBus } from "../lifecycle/event-bus.ts";
import { eventRoutes } from "./event-stream.ts";
import { type HarnessRoutesOptions, harnessRoutes } from "./harness-routes.ts";
import { snapshotRoutes } from "./snapshot-routes.ts";
import { webhookRoutes } from "./webhook-routes.ts";
import type { RpcHandlers } from "../lifecycle/lifecycle.ts";
import { type Logger, silentLogger } from "../observability/log.ts";
import type { Metrics } from "../observability/metrics.ts";
import { metricsRoute } from "./metrics-route.ts";
import { buildOpenApiDocument } from "./openapi.ts";
import { OPENAI_CHAT_PATH, openAIErrors, openAIRoutes } from "./openai-routes.ts";
import { auditProxiedRequests } from "./request-audit.ts";
import { PORT_PATH, portRoutes } from "./port-routes.ts";
import { securityHeaders } from "./security-headers.ts";
import { resourceRoutes } from "./resource-routes.ts";
import { clusterListRoutes } from "./cluster-list-routes.ts";
import { serverVersion } from "./version-route.ts";
import { rpcMetrics } from "./rpc-metrics.ts";
import { authorizeRoute } from "./route-access.ts";
import { RpcAccess } from "./rpc-access.ts";
import { rpcRoutes } from "./rpc-routes.ts";
import { RUNNER_CONNECT_PATH } from "../runners/runner-hub.ts";
import { readiness } from "./readiness.ts";
import type { RunnerDirectory } from "../lifecycle/runner-directory.ts";
import { type RunnerRoutesOptions, runnerRoutes } from "./runner-routes.ts";
import type { HarnessStore } from "../store/harness-store.ts";
import type { Store } from "../store/store.ts";
import type { TokenStore } from "../store/token-store.ts";
import { tokenRoutes } from "./token-routes.ts";
import { uiRoutes } from "./ui-route.ts";
import type { WorkspaceFilesRelay } from "../relay/workspace-files.ts";
import { harnessWorkspaceRoutes, rpcWorkspaceRoutes } from "./workspace-routes.ts";

export type AppOptions = {
  store: Store;
  bus: EventBus;
  rpc: RpcHandlers;
  adminToken: string;
  runnerToken: string;
  /** Scoped API tokens (`/v1/tokens`); absent: only the admin token opens the client API. */
  tokens?: TokenStore;
  /** Ends open event streams (server shutdown). */
  shutdown?: AbortSignal;
  /** @default 15000 */
  keepAliveMs?: number;
  log?: Logger;
  /** HarnessSessions, their request proxy and one-shot AgentRuns; absent in RPC-only setups. */
  harness?: HarnessRoutesOptions;
  /** `GET /metrics` and the RPC, proxy and runner-command metrics; absent: no `/metrics`. */
  metrics?: Metrics;
  /** Serve `/metrics` without a token. @default false */
  metricsPublic?: boolean;
  /** Called once per proxied request. @default an `audit` log line (and metrics) */
  audit?: Audit;
  /** Whether a runner can serve, as `/readyz` says (readiness.ts); absent: `/readyz` checks the store alone. */
  runners?: Pick<RunnerDirectory, "connectedRunners">;
  /** `/v1/runners`: list, drain and undrain runners; absent: no runner admin API. */
  runnerAdmin?: Omit<RunnerRoutesOptions, "store" | "log">;
  /**
   * Largest body of any JSON route (resources, RPCs, runs, runner admin); more is 413
   * RESOURCE_EXHAUSTED before anything is parsed. The proxied `…/requests` have their own limit
   * (AGENT_SESSIONS_REQUEST_BODY_MAX_BYTES). @default 1048576
   */
  jsonBodyMaxBytes?: number;
  /** Open `/v1/events` streams of API tokens at most; more is 429 RESOURCE_EXHAUSTED. @default 2000 */
  maxEventSubscribers?: number;
  /** Open `/v1/events` streams one API token may hold (an admin: unbounded). @default 16 */
  eventSubscribersPerTokenMax?: number;
  /** Open `/v1/events` streams the tokens of one namespace may hold together (admins: none counted). @default 64 */
  eventSubscribersPerNamespaceMax?: number;
  /** Bytes waiting for one `/v1/events` follower at most; past it it is dropped. @default 8388608 */
  eventQueueMaxBytes?: number;
  /**
   * The environment offered to sessions (offeredCredentialEnv): an Agent PUT whose credential
   * `secretRef` names a variable outside it, or unset, is 400. @default none offered
   */
  secretEnv?: Readonly<Record<string, string | undefined>>;
  /** What the operator admits (an Agent PUT's egress: egress-guard.ts). @default defaultAdmission(): no egress */
  admission?: Admission;
  /**
   * HarnessSessions' records: a session token reads the workspace (and the agent sessions) its
   * HarnessSession's record names (rpc-access.ts); absent: no session token reads any.
   */
  harnessStore?: HarnessStore;
  /** The workspace files API (`…/workspace/files`, `…/workspace:archive`); absent: no such routes. */
  workspaceFiles?: WorkspaceFilesRelay;
};

/** @default of AppOptions.jsonBodyMaxBytes: 1 MiB. */
export const DEFAULT_JSON_BODY_MAX_BYTES = 1024 * 1024;

/** The proxy's request route: its body is the session's business, limited by the relay. */
const PROXIED_REQUEST_PATH = /^\/v1\/namespaces\/[^/]+\/harnesssessions\/[^/]+\/requests\/?$/;
/** Workspace uploads: bounded by AGENT_SESSIONS_WORKSPACE_FILE_MAX_BYTES, streamed, never buffered. */
const WORKSPACE_FILES_PATH =
  /^\/v1\/(namespaces\/[^/]+\/harnesssessions|workspaces)\/[^/]+\/workspace\/files\//;
/** Snapshot archive imports: bounded by AGENT_SESSIONS_SNAPSHOT_ARCHIVE_MAX_BYTES, streamed to a staging file. */
const SNAPSHOT_ARCHIVE_PATH = /^\/v1\/namespaces\/[^/]+\/sessionsnapshots\/[^/]+\/archive$/;

/**
 * The HTTP API (never listens; `main.ts` does). Everything under `/v1` takes a bearer token: the
 * admin token or a scoped API token, each route checking its scope (route-access.ts); the runner link is a WebSocket upgrade handled by the RunnerHub before Hono sees it.
 */
export function buildApp(options: AppOptions): Hono {
  const log = options.log ?? silentLogger;
  const app = new Hono();
  // Every response echoes `x-request-id` (the caller's when well-formed, else a new UUID).
  app.use("*", requestId());
  app.use("*", accessLog(log));
  app.use("*", securityHeaders());

  app.get("/healthz", (c) => c.json({ status: "ok" }));
  app.get("/readyz", (c) => {
    if (!options.store.isOpen) throw new CodedError("UNAVAILABLE", "the store is not open");
    return c.json(options.runners ? readiness(options.runners) : { status: "ready" });
  });
  // Reached only by a request that is not a WebSocket upgrade.
  app.get(RUNNER_CONNECT_PATH, () => {
    throw new CodedError(
      "FAILED_PRECONDITION",
      "runners connect here with a WebSocket upgrade and a runner token",
    );
  });

  // The web UI: static files; it calls the API below with the token the user pastes.
  app.route("/", uiRoutes({ log }));

  let openapi: string | undefined;
  app.get("/openapi.json", (c) => {
    openapi ??= JSON.stringify(buildOpenApiDocument());
    return c.body(openapi, 200, { "content-type": "application/json" });
  });
  if (options.metrics)
    app.route(
      "/metrics",
      metricsRoute({ ...options, metrics: options.metrics, public: options.metricsPublic ?? false }),
    );

  const harnessStore = options.harnessStore;
  const sessionUid = harnessStore
    ? async (namespace: string, name: string) => (await harnessStore.getHarnessSession(namespace, name))?.uid
    : undefined;
  const apiTokens = new ApiTokens({
    adminToken: options.adminToken,
    runnerToken: options.runnerToken,
    store: options.tokens,
    sessionUid,
  });
  // A session's OpenAI-compatible API answers every error in OpenAI's shape, authentication's too.
  if (options.harness) app.use("/v1/namespaces/:ns/harnesssessions/:name/openai/*", openAIErrors());
  app.use("/v1/*", authenticate(apiTokens));
  app.use("/v1/*", authorizeRoute({ sessionUid }));
  const jsonBodyMaxBytes = options.jsonBodyMaxBytes ?? DEFAULT_JSON_BODY_MAX_BYTES;
  const limitBody = bodyLimit({
    maxSize: jsonBodyMaxBytes,
    onError: (c) =>
      c.json(
        {
          code: "RESOURCE_EXHAUSTED",
          message: `the request body exceeds ${jsonBodyMaxBytes} bytes`,
          details: { limit_bytes: jsonBodyMaxBytes },
        },
        413,
      ),
  });
  app.use("/v1/*", (c, next) =>
    PROXIED_REQUEST_PATH.test(c.req.path) ||
    OPENAI_CHAT_PATH.test(c.req.path) ||
    WORKSPACE_FILES_PATH.test(c.req.path) ||
    SNAPSHOT_ARCHIVE_PATH.test(c.req.path) ||
    PORT_PATH.test(c.req.path)
      ? next()
      : limitBody(c, next),
  );
  if (options.metrics) app.use("/v1/rpc/:method", rpcMetrics(options.metrics));
  const audit = options.audit ?? createAudit(log, options.metrics);
  const auditProxied = auditProxiedRequests(audit);
  app.use("/v1/namespaces/:ns/harnesssessions/:name/requests", auditProxied);
  app.use("/v1/namespaces/:ns/harnesssessions/:name/openai/v1/chat/completions", auditProxied);
  app.get("/v1/whoami", (c) => {
    const { name, id, scopes } = c.get("principal");
    return c.json({ name, id, scopes: scopes.map(formatScope) } satisfies WhoAmI);
  });
  app.get("/v1/version", (c) => c.json(serverVersion()));
  app.route("/v1/tokens", tokenRoutes(apiTokens));
  const rpcAccess = new RpcAccess({ store: options.store, harness: options.harnessStore });
  app.route("/v1/rpc", rpcRoutes(options.rpc, rpcAccess));
  app.route(
    "/v1/namespaces",
    resourceRoutes({
      store: options.store,
      admission: options.admission ?? defaultAdmission(),
      ...(options.secretEnv ? { secretEnv: options.secretEnv } : {}),
      ...(options.harness?.rebind ? { onWritten: options.harness.rebind } : {}),
    }),
  );
  app.route(
    "/v1",
    clusterListRoutes({
      store: options.store,
      admission: options.admission ?? defaultAdmission(),
      sessions: options.harness?.sessions,
    }),
  );
  if (options.runnerAdmin)
    app.route("/v1/runners", runnerRoutes({ ...options.runnerAdmin, store: options.store, log }));
  if (options.harness?.snapshots) app.route("/v1/namespaces", snapshotRoutes(options.harness.snapshots));
  if (options.harness?.webhooks) app.route("/v1/namespaces", webhookRoutes(options.harness.webhooks));
  if (options.harness) {
    app.route("/v1/namespaces", harnessRoutes(options.harness));
    app.route("/v1/namespaces", openAIRoutes(options.harness));
    if (options.harness.ports)
      app.route("/v1/namespaces", portRoutes(options.harness.ports, audit, apiTokens));
  }
  if (options.workspaceFiles) {
    app.route("/v1/namespaces", harnessWorkspaceRoutes(options.workspaceFiles));
    app.route("/v1/workspaces", rpcWorkspaceRoutes(options.workspaceFiles, rpcAccess));
  }
  const events: Parameters<typeof eventRoutes>[0] = {
    store: options.store,
    bus: options.bus,
    ...(harnessStore
      ? { harnessSession: (ns: string, n: string) => harnessStore.getHarnessSession(ns, n) }
      : {}),
    visibilityOf: (principal) => sessionVisibility(options.store, principal, options.harnessStore),
    sessionLabel: sessionLabels(options.store, options.harnessStore),
    revalidate: async (authorization) => (await apiTokens.authenticate(authorization)).ok,
    onRevoked: (listener) => apiTokens.onRevoked(listener),
  };
  if (options.maxEventSubscribers !== undefined) events.maxSubscribers = options.maxEventSubscribers;
  if (options.eventSubscribersPerTokenMax !== undefined)
    events.maxSubscribersPerToken = options.eventSubscribersPerTokenMax;
  if (options.eventSubscribersPerNamespaceMax !== undefined)
    events.maxSubscribersPerNamespace = options.eventSubscribersPerNamespaceMax;
  if (options.eventQueueMaxBytes !== undefined) events.maxQueuedBytes = options.eventQueueMaxBytes;
  if (options.shutdown) events.shutdown = options.shutdown;
  if (options.keepAliveMs !== undefined) events.keepAliveMs = options.keepAliveMs;
  app.route("/v1/events", eventRoutes(events));

  app.notFound((c) =>
    c.json({ code: "NOT_FOUND", message: `no route for ${c.req.method} ${c.req.path}` }, 404),
  );
  app.onError((error, c) => {
    const { status, body, internal } = toErrorResponse(error);
    if (internal)
      log("error", "unhandled error", {
        request_id: c.get("requestId"),
        method: c.req.method,
        path: c.req.path,
        error: String(error),
      });
    return c.json(body, status as 400);
  });
  return app;
}
