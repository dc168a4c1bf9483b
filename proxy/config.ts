import { DEFAULT_SNAPSHOT_ARCHIVE_MAX_BYTES } from "../contracts/session-snapshot.ts";
import { randomBytes } from "node:crypto";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { z } from "zod";
import { describeZodError } from "../contracts/errors.ts";
import { DigestPinnedImage } from "../contracts/session-spec.ts";
import { CredentialEnvAllowlist } from "./lifecycle/credential-env.ts";
import {
  type EgressAllow,
  EgressAllowList,
  type EgressDeny,
  EgressDenyList,
} from "./lifecycle/egress-guard.ts";
import { NamespaceLimitList, type NamespaceLimits, type QuotaKind } from "./lifecycle/namespace-quotas.ts";
import type { RestartPolicy } from "./harness/restart-policy.ts";
import { ApprovedRegistryList, ApprovedRuntimeList } from "./lifecycle/runtime-approval.ts";
import { DatabaseUrl } from "./store/database-url.ts";
import { WebhookEgressAllowList } from "./webhooks/webhook-egress.ts";
import {
  SHIPPED_RUNTIMES,
  type ShippedImageSetting,
  type ShippedRuntimeImages,
} from "../runtimes/catalogue.ts";

/** The image settings of the shipped runtimes, keyed by variable name like every other setting. */
function shippedImageSettings() {
  return Object.fromEntries(SHIPPED_RUNTIMES.map((r) => [r.imageSetting, DigestPinnedImage.optional()])) as {
    [S in ShippedImageSetting]: ReturnType<typeof DigestPinnedImage.optional>;
  };
}

const Int = (min: number) => z.coerce.number().int().min(min);
const Token = z.string().min(16, "must be at least 16 characters");

/**
 * The server's environment: one schema, keyed by variable name, defaults and units here, parsed
 * when asked (never at import). The only reader of the server's settings; docs/configuration.md
 * lists every key (test/unit/settings.test.ts keeps the two in step).
 */
export const ServerEnv = z.object({
  /** @default 8787 (0 = any free port) */
  AGENT_SESSIONS_PORT: Int(0).max(65535).default(8787),
  /** @default 127.0.0.1 */
  AGENT_SESSIONS_HOST: z.string().min(1).default("127.0.0.1"),
  /** Holds the store, generated tokens. @default ./.data */
  AGENT_SESSIONS_DATA_DIR: z.string().min(1).default(".data"),
  /**
   * `postgres://user:password@host:port/database`: keep the server's state in PostgreSQL instead
   * of `<data-dir>/agent-sessions.db` (migrated at start). @default unset (SQLite)
   */
  AGENT_SESSIONS_DATABASE_URL: DatabaseUrl.optional(),
  /** Admin (client API) bearer token, at least 16 characters. @default unset: read from or generated into `<data-dir>/admin-token` */
  AGENT_SESSIONS_TOKEN: Token.optional(),
  /**
   * Runner registration token; generated into `<data-dir>/runner-token` when unset. A runner
   * registers its name with it once and gets its own credential (proxy/runners/runner-identity.ts).
   * @default unset: read from or generated into `<data-dir>/runner-token`
   */
  AGENT_SESSIONS_RUNNER_TOKEN: Token.optional(),
  /** Ping interval of the runner link; 2 missed heartbeats = disconnected. @default 5000 */
  AGENT_SESSIONS_HEARTBEAT_MS: Int(50).default(5_000),
  /** How long a lost runner may take to reattach before its sessions become ERRORED. @default 60000 */
  AGENT_SESSIONS_REATTACH_WINDOW_MS: Int(0).default(60_000),
  /** Frames kept per session for Last-Event-ID resumption. @default 1000 */
  AGENT_SESSIONS_FRAME_BUFFER_SIZE: Int(1).default(1_000),
  /** The most workspaces a runner may take, whatever capacity its hello claims. @default 1000 */
  AGENT_SESSIONS_RUNNER_MAX_CAPACITY: Int(1).default(1_000),
  /**
   * `open`: the runner token registers a new runner name once (the runner then holds its own
   * credential); `closed`: only credentials an admin issued (`runners token create`). @default open
   */
  AGENT_SESSIONS_RUNNER_REGISTRATION: z.enum(["open", "closed"]).default("open"),
  /** Deadline of one runner command; provisioning can take about a minute. @default 300000 */
  AGENT_SESSIONS_COMMAND_TIMEOUT_MS: Int(1).default(300_000),
  /**
   * One setting a shipped runtime (runtimes/catalogue.ts: AGENT_SESSIONS_REFERENCE_IMAGE,
   * AGENT_SESSIONS_PI_IMAGE, AGENT_SESSIONS_COMPASS_IMAGE, AGENT_SESSIONS_HERMES_IMAGE): the image
   * of AgentRuntime `default/<name>`, registered on first start when set. @default unset
   */
  ...shippedImageSettings(),
  /** Deadline of one request relayed to a HarnessSession; then 504 DEADLINE_EXCEEDED. @default 120000 */
  AGENT_SESSIONS_REQUEST_TIMEOUT_MS: Int(1).default(120_000),
  /** Largest request body the proxy accepts; more is 413 RESOURCE_EXHAUSTED. @default 131072 */
  AGENT_SESSIONS_REQUEST_BODY_MAX_BYTES: Int(1).default(128 * 1024),
  /** Largest workspace upload, download or archive (the files API); more is 413 RESOURCE_EXHAUSTED. @default 67108864 */
  AGENT_SESSIONS_WORKSPACE_FILE_MAX_BYTES: Int(1).default(64 * 1024 * 1024),
  /**
   * Largest body of every other JSON route (resources, RPCs, runs, runner admin); more is 413
   * RESOURCE_EXHAUSTED. @default 1048576
   */
  AGENT_SESSIONS_JSON_BODY_MAX_BYTES: Int(1).default(1024 * 1024),
  /**
   * Open `/v1/events` streams of API tokens at most (the admin's are not counted); one more is
   * 429 RESOURCE_EXHAUSTED. @default 2000
   */
  AGENT_SESSIONS_EVENT_SUBSCRIBERS_MAX: Int(1).default(2_000),
  /** Open `/v1/events` streams one API token may hold at once (the admin: unbounded). @default 16 */
  AGENT_SESSIONS_EVENT_SUBSCRIBERS_PER_TOKEN_MAX: Int(1).default(16),
  /** Proxied requests (`…/requests`) one API token may have in flight at once (the admin: unbounded). @default 32 */
  AGENT_SESSIONS_REQUESTS_PER_TOKEN_MAX: Int(1).default(32),
  /**
   * Open `/v1/events` streams the tokens scoped to one namespace may hold together (a token counts
   * toward each namespace its scopes name; the admin toward none). @default 64
   */
  AGENT_SESSIONS_EVENT_SUBSCRIBERS_PER_NAMESPACE_MAX: Int(1).default(64),
  /**
   * Proxied requests to the sessions of one namespace in flight at once, whichever API tokens
   * sent them (the admin's are not counted). @default 256
   */
  AGENT_SESSIONS_REQUESTS_PER_NAMESPACE_MAX: Int(1).default(256),
  /**
   * Bytes of frames waiting for one `/v1/events` follower at most; past it the follower is
   * dropped (an `event: reconnect` tells it its Last-Event-ID). @default 8388608
   */
  AGENT_SESSIONS_EVENT_QUEUE_MAX_BYTES: Int(1024).default(8 * 1024 * 1024),
  /**
   * One-shot AgentRuns at once at most (each also takes a place of its runner's capacity while it
   * runs); one more is 429 RESOURCE_EXHAUSTED. @default 16
   */
  AGENT_SESSIONS_AGENT_RUNS_MAX: Int(1).default(16),
  /**
   * Sessions (workspaces and HarnessSessions) a namespace may hold: `N` for every namespace, or
   * `ns=N,…` with `*=N` for the rest; more is 429 RESOURCE_EXHAUSTED. @default no quota
   */
  AGENT_SESSIONS_NAMESPACE_MAX_SESSIONS: NamespaceLimitList.optional(),
  /** Warm pool entries a namespace's AgentRuntimes may keep, in the same form. @default no quota */
  AGENT_SESSIONS_NAMESPACE_MAX_WARM_POOL_ENTRIES: NamespaceLimitList.optional(),
  /** One-shot AgentRuns a namespace may run at once, in the same form. @default no quota */
  AGENT_SESSIONS_NAMESPACE_MAX_AGENT_RUNS: NamespaceLimitList.optional(),
  /** SessionSnapshots a namespace may keep, in the same form. @default no quota */
  AGENT_SESSIONS_NAMESPACE_MAX_SNAPSHOTS: NamespaceLimitList.optional(),
  /** Bytes a namespace's SessionSnapshots may hold (their files' sizes summed), in the same form. @default no quota */
  AGENT_SESSIONS_NAMESPACE_MAX_SNAPSHOT_BYTES: NamespaceLimitList.optional(),
  /**
   * Largest snapshot archive imported (compressed, and again once uncompressed) or exported
   * (uncompressed); more is 413 RESOURCE_EXHAUSTED. @default 1073741824
   */
  AGENT_SESSIONS_SNAPSHOT_ARCHIVE_MAX_BYTES: Int(1).default(DEFAULT_SNAPSHOT_ARCHIVE_MAX_BYTES),
  /** Largest reply the proxy relays. @default 8388608 */
  AGENT_SESSIONS_REPLY_MAX_BYTES: Int(1).default(8 * 1024 * 1024),
  /** Frames a second one session's runner may send before they are dropped (2 s may come at once). @default 4000 */
  AGENT_SESSIONS_SESSION_FRAMES_PER_SECOND: Int(1).default(4_000),
  /** Frame bytes a second one session's runner may send before they are dropped. @default 16777216 */
  AGENT_SESSIONS_SESSION_FRAME_BYTES_PER_SECOND: Int(1).default(16 * 1024 * 1024),
  /** How often the idle controller looks for idle HarnessSessions. @default 1000 */
  AGENT_SESSIONS_IDLE_CHECK_MS: Int(50).default(1_000),
  /**
   * A HarnessSession whose workload or agent exits unexpectedly is restarted after this delay,
   * doubled for each restart in a row (restart-policy.ts). @default 1000
   */
  AGENT_SESSIONS_RESTART_BACKOFF_MS: Int(0).default(1_000),
  /** The longest delay before a restart. @default 60000 */
  AGENT_SESSIONS_RESTART_MAX_BACKOFF_MS: Int(0).default(60_000),
  /** Restarts in a row before the session is Failed/CrashLoop (0: never restarted). @default 5 */
  AGENT_SESSIONS_RESTART_LIMIT: Int(0).default(5),
  /** Running this long since the last restart forgets the earlier ones. @default 600000 */
  AGENT_SESSIONS_RESTART_RESET_MS: Int(0).default(600_000),
  /** How long a request waits for an auto-resumed HarnessSession to come Ready; then 504. @default 120000 */
  AGENT_SESSIONS_AUTO_RESUME_TIMEOUT_MS: Int(1).default(120_000),
  /** Serve `GET /metrics` without the admin token (a scraper on a trusted network). @default false */
  AGENT_SESSIONS_METRICS_PUBLIC: z.stringbool().default(false),
  /**
   * Per-session series on `GET /metrics` (`agent_sessions_session_*{namespace,name}`): every this
   * many ms each Ready or Paused session's metrics are read of its engine (observability/session-series.ts);
   * 0 leaves them out. @default 0
   */
  AGENT_SESSIONS_SESSION_SERIES_MS: Int(0)
    .default(0)
    .refine(
      (ms) => ms === 0 || ms >= 1_000,
      "0 (off) or at least 1000 ms: each read takes the engine about a second",
    ),
  /** Sessions with per-session series at most (the first by namespace and name); the rest are counted in `agent_sessions_session_series_omitted`. @default 200 */
  AGENT_SESSIONS_SESSION_SERIES_MAX: Int(1).default(200),
  /**
   * The server environment variables an Agent credential's `secretRef.env` may name,
   * comma-separated: names and/or prefixes ending in `*` (never AGENT_SESSIONS_*). @default none
   */
  AGENT_SESSIONS_CREDENTIAL_ENV: CredentialEnvAllowlist.default([]),
  /**
   * Destinations no Agent's egress may reach, comma-separated `cidr` (every port) or `cidr:port`:
   * the cluster's pod and service ranges, the runners' and engines' addresses. Loopback,
   * link-local, multicast, ranges wider than /16, the control-plane ports and the server's own
   * port are refused anyway. @default none
   */
  AGENT_SESSIONS_EGRESS_DENY: EgressDenyList.default([]),
  /**
   * The only destinations an Agent's egress may name, comma-separated IPv4 `cidr` (every port),
   * `cidr:port` or `cidr:first-last`: the model endpoints and git servers sessions may reach.
   * An Agent naming anything else is refused (FAILED_PRECONDITION). @default none (no egress)
   */
  AGENT_SESSIONS_EGRESS_ALLOW: EgressAllowList.default([]),
  /**
   * Addresses webhook receivers may have although the webhook egress guard refuses them (loopback,
   * link-local, metadata: proxy/webhooks/webhook-egress.ts), comma-separated IPv4 or IPv6 CIDRs
   * or addresses, e.g. `127.0.0.1/32` for a receiver on the server's host. @default none
   */
  AGENT_SESSIONS_WEBHOOK_EGRESS_ALLOW: WebhookEgressAllowList.default([]),
  /** Attempts to deliver one webhook message at most, the first included. @default 8 */
  AGENT_SESSIONS_WEBHOOK_ATTEMPTS_MAX: Int(1).max(30).default(8),
  /** The wait after a webhook delivery's first failed attempt, doubled after each further one (at most 60 s). @default 1000 */
  AGENT_SESSIONS_WEBHOOK_RETRY_BASE_MS: Int(1).default(1_000),
  /** How long one webhook attempt may take (connect, send, answer). @default 10000 */
  AGENT_SESSIONS_WEBHOOK_TIMEOUT_MS: Int(1).default(10_000),
  /**
   * Registry hosts (`host[:port]`) runtime images may come from, comma-separated: a runtime whose
   * image comes from elsewhere is not approved. @default 127.0.0.1:5000
   */
  AGENT_SESSIONS_APPROVED_REGISTRIES: ApprovedRegistryList.optional(),
  /**
   * The runtimes approved, comma-separated `namespace/name`, `namespace/*` or `*` (their images
   * must still come from an approved registry). @default *
   */
  AGENT_SESSIONS_APPROVED_RUNTIMES: ApprovedRuntimeList.optional(),
});

/**
 * Every setting of the server but where it lives and its tokens: the one place their defaults
 * come from (`ServerEnv`, via `defaultSettings()`); the services take them as required options.
 */
export type ServerSettings = {
  port: number;
  host: string;
  /** AGENT_SESSIONS_HEARTBEAT_MS */
  heartbeatMs: number;
  /** AGENT_SESSIONS_REATTACH_WINDOW_MS */
  reattachWindowMs: number;
  /** AGENT_SESSIONS_FRAME_BUFFER_SIZE */
  frameBufferSize: number;
  /** AGENT_SESSIONS_COMMAND_TIMEOUT_MS */
  commandTimeoutMs: number;
  /** AGENT_SESSIONS_RUNNER_MAX_CAPACITY: capacity a runner's hello may claim at most. */
  maxRunnerCapacity: number;
  /** AGENT_SESSIONS_RUNNER_REGISTRATION: whether the runner token registers new runner names. */
  runnerRegistration: "open" | "closed";
  /**
   * Each shipped runtime's image setting, by runtime name (e.g. `pi`: AGENT_SESSIONS_PI_IMAGE).
   * @default none: that runtime is not registered
   */
  shippedImages: ShippedRuntimeImages;
  /** AGENT_SESSIONS_REQUEST_TIMEOUT_MS: deadline of a request relayed to a HarnessSession. */
  requestTimeoutMs: number;
  /** AGENT_SESSIONS_REQUEST_BODY_MAX_BYTES */
  requestBodyMaxBytes: number;
  /** AGENT_SESSIONS_REPLY_MAX_BYTES */
  replyMaxBytes: number;
  /** AGENT_SESSIONS_WORKSPACE_FILE_MAX_BYTES */
  workspaceFileMaxBytes: number;
  /** AGENT_SESSIONS_SNAPSHOT_ARCHIVE_MAX_BYTES */
  snapshotArchiveMaxBytes: number;
  /** AGENT_SESSIONS_SESSION_FRAMES_PER_SECOND: per-session budget of frames from runners (runners/frame-budget.ts). */
  sessionFramesPerSecond: number;
  /** AGENT_SESSIONS_SESSION_FRAME_BYTES_PER_SECOND */
  sessionFrameBytesPerSecond: number;
  /** AGENT_SESSIONS_JSON_BODY_MAX_BYTES */
  jsonBodyMaxBytes: number;
  /** AGENT_SESSIONS_EVENT_SUBSCRIBERS_MAX */
  maxEventSubscribers: number;
  /** AGENT_SESSIONS_EVENT_SUBSCRIBERS_PER_TOKEN_MAX */
  eventSubscribersPerTokenMax: number;
  /** AGENT_SESSIONS_REQUESTS_PER_TOKEN_MAX */
  requestsPerTokenMax: number;
  /** AGENT_SESSIONS_EVENT_SUBSCRIBERS_PER_NAMESPACE_MAX */
  eventSubscribersPerNamespaceMax: number;
  /** AGENT_SESSIONS_REQUESTS_PER_NAMESPACE_MAX */
  requestsPerNamespaceMax: number;
  /** AGENT_SESSIONS_EVENT_QUEUE_MAX_BYTES */
  eventQueueMaxBytes: number;
  /** AGENT_SESSIONS_AGENT_RUNS_MAX */
  agentRunsMax: number;
  /** AGENT_SESSIONS_NAMESPACE_MAX_*: per-namespace quotas (lifecycle/namespace-quotas.ts). @default none */
  namespaceQuotas: Partial<Record<QuotaKind, NamespaceLimits>>;
  /** AGENT_SESSIONS_IDLE_CHECK_MS */
  idleCheckMs: number;
  /** AGENT_SESSIONS_AUTO_RESUME_TIMEOUT_MS */
  autoResumeTimeoutMs: number;
  /** AGENT_SESSIONS_RESTART_*: restarts of HarnessSessions after unexpected exits. */
  restartPolicy: RestartPolicy;
  /** AGENT_SESSIONS_METRICS_PUBLIC: `GET /metrics` without a token. */
  metricsPublic: boolean;
  /** AGENT_SESSIONS_SESSION_SERIES_MS and _MAX: per-session series (0 ms: off). */
  sessionSeries: { intervalMs: number; maxSessions: number };
  /** AGENT_SESSIONS_CREDENTIAL_ENV: variables offered to sessions as credential sources. */
  credentialEnv: string[];
  /** AGENT_SESSIONS_EGRESS_DENY */
  egressDeny: EgressDeny[];
  /** AGENT_SESSIONS_EGRESS_ALLOW */
  egressAllow: EgressAllow[];
  /** AGENT_SESSIONS_WEBHOOK_*: webhook delivery (proxy/webhooks/). */
  webhooks: { egressAllow: string[]; attemptsMax: number; retryBaseMs: number; timeoutMs: number };
  /** AGENT_SESSIONS_APPROVED_REGISTRIES. @default ["127.0.0.1:5000"] (lifecycle/runtime-approval.ts) */
  approvedRegistries?: string[];
  /** AGENT_SESSIONS_APPROVED_RUNTIMES. @default ["*"] (lifecycle/runtime-approval.ts) */
  approvedRuntimes?: string[];
};

/** Resolved server options: what `startServer` takes. */
export type ServerConfig = ServerSettings & {
  /** AGENT_SESSIONS_DATABASE_URL: PostgreSQL instead of the data directory's SQLite file. Holds a password. */
  databaseUrl?: string | undefined;
  /** Absolute. */
  dataDir: string;
  adminToken: string;
  /** Where the admin token was read from or generated into; unset when AGENT_SESSIONS_TOKEN gave it. */
  adminTokenFile?: string | undefined;
  runnerToken: string;
};

/** The settings of a server given no environment: `ServerEnv`'s defaults (tests start from these). */
export function defaultSettings(): ServerSettings {
  return settingsOf(ServerEnv.parse({}));
}

/** A server variable's name. */
export type ServerVariable = keyof z.input<typeof ServerEnv>;

/**
 * Parse the server's configuration. Tokens not given are read from, or generated into,
 * `<data-dir>/admin-token` and `<data-dir>/runner-token` (mode 0600), so restarts keep them.
 * An empty variable counts as unset; `fallback` gives values for variables the source leaves
 * unset (`serve`: the images the test bed built).
 */
export function parseConfig(
  source: Record<string, string | undefined> = process.env,
  fallback: Partial<Record<ServerVariable, string | undefined>> = {},
): ServerConfig {
  const parsed = ServerEnv.safeParse({ ...given(fallback), ...given(source) });
  if (!parsed.success) throw new Error(`invalid configuration: ${describeZodError(parsed.error)}`);
  const env = parsed.data;
  const dataDir = resolve(env.AGENT_SESSIONS_DATA_DIR);
  mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  const adminTokenFile = env.AGENT_SESSIONS_TOKEN ? undefined : join(dataDir, "admin-token");
  const adminToken = env.AGENT_SESSIONS_TOKEN ?? tokenFile(join(dataDir, "admin-token"));
  const runnerToken = env.AGENT_SESSIONS_RUNNER_TOKEN ?? tokenFile(join(dataDir, "runner-token"));
  // One token for both would let a runner call the client API: the separation is the point.
  if (adminToken === runnerToken)
    throw new Error("invalid configuration: the admin token and the runner token must differ");
  return {
    ...settingsOf(env),
    dataDir,
    adminToken,
    adminTokenFile,
    runnerToken,
    databaseUrl: env.AGENT_SESSIONS_DATABASE_URL,
  };
}

/** The entries that are set: an empty variable is unset. */
function given(source: Record<string, string | undefined>): Record<string, string> {
  return Object.fromEntries(
    Object.entries(source).filter(
      (entry): entry is [string, string] => entry[1] !== undefined && entry[1] !== "",
    ),
  );
}

function settingsOf(env: z.infer<typeof ServerEnv>): ServerSettings {
  return {
    port: env.AGENT_SESSIONS_PORT,
    host: env.AGENT_SESSIONS_HOST,
    heartbeatMs: env.AGENT_SESSIONS_HEARTBEAT_MS,
    reattachWindowMs: env.AGENT_SESSIONS_REATTACH_WINDOW_MS,
    frameBufferSize: env.AGENT_SESSIONS_FRAME_BUFFER_SIZE,
    commandTimeoutMs: env.AGENT_SESSIONS_COMMAND_TIMEOUT_MS,
    maxRunnerCapacity: env.AGENT_SESSIONS_RUNNER_MAX_CAPACITY,
    runnerRegistration: env.AGENT_SESSIONS_RUNNER_REGISTRATION,
    shippedImages: Object.fromEntries(SHIPPED_RUNTIMES.map((r) => [r.name, env[r.imageSetting]])),
    requestTimeoutMs: env.AGENT_SESSIONS_REQUEST_TIMEOUT_MS,
    requestBodyMaxBytes: env.AGENT_SESSIONS_REQUEST_BODY_MAX_BYTES,
    workspaceFileMaxBytes: env.AGENT_SESSIONS_WORKSPACE_FILE_MAX_BYTES,
    snapshotArchiveMaxBytes: env.AGENT_SESSIONS_SNAPSHOT_ARCHIVE_MAX_BYTES,
    replyMaxBytes: env.AGENT_SESSIONS_REPLY_MAX_BYTES,
    sessionFramesPerSecond: env.AGENT_SESSIONS_SESSION_FRAMES_PER_SECOND,
    sessionFrameBytesPerSecond: env.AGENT_SESSIONS_SESSION_FRAME_BYTES_PER_SECOND,
    jsonBodyMaxBytes: env.AGENT_SESSIONS_JSON_BODY_MAX_BYTES,
    maxEventSubscribers: env.AGENT_SESSIONS_EVENT_SUBSCRIBERS_MAX,
    eventSubscribersPerTokenMax: env.AGENT_SESSIONS_EVENT_SUBSCRIBERS_PER_TOKEN_MAX,
    requestsPerTokenMax: env.AGENT_SESSIONS_REQUESTS_PER_TOKEN_MAX,
    eventSubscribersPerNamespaceMax: env.AGENT_SESSIONS_EVENT_SUBSCRIBERS_PER_NAMESPACE_MAX,
    requestsPerNamespaceMax: env.AGENT_SESSIONS_REQUESTS_PER_NAMESPACE_MAX,
    eventQueueMaxBytes: env.AGENT_SESSIONS_EVENT_QUEUE_MAX_BYTES,
    agentRunsMax: env.AGENT_SESSIONS_AGENT_RUNS_MAX,
    namespaceQuotas: {
      ...(env.AGENT_SESSIONS_NAMESPACE_MAX_SESSIONS
        ? { sessions: env.AGENT_SESSIONS_NAMESPACE_MAX_SESSIONS }
        : {}),
      ...(env.AGENT_SESSIONS_NAMESPACE_MAX_WARM_POOL_ENTRIES
        ? { warmPoolEntries: env.AGENT_SESSIONS_NAMESPACE_MAX_WARM_POOL_ENTRIES }
        : {}),
      ...(env.AGENT_SESSIONS_NAMESPACE_MAX_SNAPSHOTS
        ? { snapshots: env.AGENT_SESSIONS_NAMESPACE_MAX_SNAPSHOTS }
        : {}),
      ...(env.AGENT_SESSIONS_NAMESPACE_MAX_SNAPSHOT_BYTES
        ? { snapshotBytes: env.AGENT_SESSIONS_NAMESPACE_MAX_SNAPSHOT_BYTES }
        : {}),
      ...(env.AGENT_SESSIONS_NAMESPACE_MAX_AGENT_RUNS
        ? { agentRuns: env.AGENT_SESSIONS_NAMESPACE_MAX_AGENT_RUNS }
        : {}),
    },
    idleCheckMs: env.AGENT_SESSIONS_IDLE_CHECK_MS,
    autoResumeTimeoutMs: env.AGENT_SESSIONS_AUTO_RESUME_TIMEOUT_MS,
    restartPolicy: {
      backoffMs: env.AGENT_SESSIONS_RESTART_BACKOFF_MS,
      maxBackoffMs: env.AGENT_SESSIONS_RESTART_MAX_BACKOFF_MS,
      maxRestarts: env.AGENT_SESSIONS_RESTART_LIMIT,
      resetAfterMs: env.AGENT_SESSIONS_RESTART_RESET_MS,
    },
    metricsPublic: env.AGENT_SESSIONS_METRICS_PUBLIC,
    sessionSeries: {
      intervalMs: env.AGENT_SESSIONS_SESSION_SERIES_MS,
      maxSessions: env.AGENT_SESSIONS_SESSION_SERIES_MAX,
    },
    credentialEnv: env.AGENT_SESSIONS_CREDENTIAL_ENV,
    egressDeny: env.AGENT_SESSIONS_EGRESS_DENY,
    egressAllow: env.AGENT_SESSIONS_EGRESS_ALLOW,
    webhooks: {
      egressAllow: env.AGENT_SESSIONS_WEBHOOK_EGRESS_ALLOW,
      attemptsMax: env.AGENT_SESSIONS_WEBHOOK_ATTEMPTS_MAX,
      retryBaseMs: env.AGENT_SESSIONS_WEBHOOK_RETRY_BASE_MS,
      timeoutMs: env.AGENT_SESSIONS_WEBHOOK_TIMEOUT_MS,
    },
    ...(env.AGENT_SESSIONS_APPROVED_REGISTRIES
      ? { approvedRegistries: env.AGENT_SESSIONS_APPROVED_REGISTRIES }
      : {}),
    ...(env.AGENT_SESSIONS_APPROVED_RUNTIMES
      ? { approvedRuntimes: env.AGENT_SESSIONS_APPROVED_RUNTIMES }
      : {}),
  };
}

/**
 * Read a token file, or create it (0600, exclusively, so two starting processes agree). A new
 * token is hex: a base64url token may begin with "-", which a command line then takes for an
 * option (`--token -x…` is refused as ambiguous).
 */
function tokenFile(path: string): string {
  try {
    writeFileSync(path, `${randomBytes(32).toString("hex")}\n`, { mode: 0o600, flag: "wx" });
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error;
  }
  const token = readFileSync(path, "utf8").trim();
  if (token.length < 16)
    throw new Error(`invalid configuration: token file ${path} is shorter than 16 characters`);
  return token;
}
