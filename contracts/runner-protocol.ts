import { z } from "zod";
import { GatewayToolCall, McpServerGrant } from "./mcp.ts";
import { AgentFrame, SessionState } from "./compass.ts";
import { Usage } from "./adapter.ts";
import { ApiErrorBody } from "./errors.ts";
import { AgentLimits } from "./resources.ts";
import { RunnerLabels, RunnerName } from "./runners.ts";
import {
  AgentCommand,
  DigestPinnedImage,
  EgressRule,
  SessionProtocolName,
  SessionSpec,
  SnapshotStorage,
} from "./session-spec.ts";
import { SeededCommit } from "./workspace-repo.ts";
import { PortHeaders } from "./session-ports.ts";

/**
 * The runner link (see proxy/PROTOCOL.md): a WebSocket the runner dials OUT to
 * `GET /v1/runners/connect`. Every message is an envelope `{version, type, payload}`, validated
 * on send and on receive. Catalogs are named by direction.
 */
export const RUNNER_PROTOCOL_VERSION = 1;

/** The largest WebSocket message either side of the runner link accepts (server and runner): 8 MiB. */
export const RUNNER_LINK_MAX_FRAME_BYTES = 8 * 1024 * 1024;

/** A command's deadline on the runner when the server names none: the server's default (PROTOCOL.md §7). */
export const RUNNER_COMMAND_DEADLINE_MS = 300_000;

/**
 * How a runner's own credential begins (PROTOCOL.md §1): the server issues them, the runner
 * presents one as its bearer; anything else it presents is the shared registration token.
 */
export const RUNNER_CREDENTIAL_PREFIX = "asr_";

export const RunnerSessionReport = z.object({
  session_id: z.string(),
  container_name: z.string(),
  state: SessionState,
  /** Why an ERRORED session ended (contracts/session-reasons.ts or an engine reason). */
  reason: z.string().optional(),
  /**
   * Whether the engine holds its workload frozen now (the paused tier): a HarnessSession on it is
   * Paused when true and not Paused when false. Absent (an older runner): not known.
   */
  paused: z.boolean().optional(),
});
export type RunnerSessionReport = z.infer<typeof RunnerSessionReport>;

/**
 * How an agent session runs in its workspace: `exec`, the runtime's agent command started in the
 * workload (our adapter contract); `none`, nothing to start: the workload's own process is the
 * whole harness (an `openai-chat` runtime, contracts/session-spec.ts SessionProtocol), the
 * session READY while it runs.
 */
export const AgentMode = z.enum(["exec", "none"]);
export type AgentMode = z.infer<typeof AgentMode>;

/** What a runner keeps of a session across its own restart: the report and the agent's command (or mode). */
export const SavedRunnerSession = RunnerSessionReport.extend({
  command: AgentCommand.optional(),
  /** Absent: `exec`. */
  mode: AgentMode.optional(),
});
export type SavedRunnerSession = z.infer<typeof SavedRunnerSession>;

/**
 * What the runner's model gateway (runner/gateway/) needs of a session's Agent: the real endpoint
 * it forwards to, the model names allowed, the budgets. The credential values come beside it
 * (`credentials`) and stay in the runner: the session gets a gateway token per credential name.
 */
export const GatewayGrant = z.object({
  /** `<namespace>/<agent>`: budgets and usage are counted per Agent. */
  agent: z.string().min(3).max(200),
  /** The Agent's model endpoint (`spec.model.baseUrl`). */
  upstream: z.url({ protocol: /^https?$/ }),
  /** `spec.model.allowedModels`; absent: any model name. */
  models: z.array(z.string()).optional(),
  limits: AgentLimits.optional(),
});
export type GatewayGrant = z.infer<typeof GatewayGrant>;

/**
 * What one end of the link takes beyond the base protocol, announced in `hello` (the runner) and
 * `welcome` (the server); a feature is used only when both announced it. Unknown names are ignored.
 * Absent: none (an older peer).
 */
export const LinkCapabilities = z.array(z.string().max(64)).max(32);
export type LinkCapabilities = z.infer<typeof LinkCapabilities>;

/**
 * A capability (LinkCapabilities; PROTOCOL.md §7): the runner takes several pieces of one upload
 * (`workspace_write`, `snapshot_write`) in flight and stages them in the order they arrive (the
 * link keeps messages' order), each answered once it is staged. Without it on both ends the
 * server sends each piece only after the previous one's answer, as before.
 */
export const UPLOAD_WINDOW_CAPABILITY = "upload_window";
/**
 * How many pieces of one upload the server keeps in flight to a runner that announced
 * UPLOAD_WINDOW_CAPABILITY (at most this many MiB of it waiting on the link and in the runner).
 */
export const UPLOAD_WINDOW_PIECES = 8;

/** What the server asks a runner to do. */
export const RunnerCommand = z.discriminatedUnion("kind", [
  z.object({
    kind: z.literal("provision"),
    container_name: z.string(),
    spec: SessionSpec,
    credentials: z.record(z.string(), z.string()),
    adapter_token: z.string(),
    /** The Agent's model, for the gateway; absent: the Agent has no model (nothing to reach). */
    gateway: GatewayGrant.optional(),
    /** The Agent's MCP servers, for the gateway (contracts/mcp.ts); absent: none. */
    mcp: z.array(McpServerGrant).max(16).optional(),
  }),
  z.object({
    kind: z.literal("start"),
    container_name: z.string(),
    session_id: z.string(),
    resume: z.boolean(),
    /** The runtime's agent command (SessionSpec.agentCommand); absent: the reference agent. */
    command: AgentCommand.optional(),
    /** Absent: `exec`. `none` for a runtime with `spec.session` (no agent to start). */
    mode: AgentMode.optional(),
  }),
  z.object({ kind: z.literal("stop"), session_id: z.string() }),
  z.object({ kind: z.literal("send"), session_id: z.string(), line: z.string().max(64 * 1024) }),
  z.object({ kind: z.literal("scale_down"), container_name: z.string() }),
  /**
   * Freeze the workspace's workload with all its memory (Docker: the engine's pause); nothing is
   * recorded in its stack (a paused container is still the declared one). Answered as soon as it
   * is frozen: its memory is asked for next, apart (`paused_memory`).
   * FAILED_PRECONDITION on an engine that cannot freeze (Kubernetes) or a workload not running.
   */
  z.object({ kind: z.literal("pause"), container_name: z.string() }),
  /**
   * After a `pause`: the paused workload's memory as the engine counts it (Docker: a stats read,
   * up to one of dockerd's ~1 s collector cycles, which is why `pause` does not wait for it), and
   * which paused workloads are over the runner's paused-memory budget (`evict`, least recently
   * paused first). The runner stops nothing itself: the server stops those (reason Evicted).
   * Never thaws anything.
   */
  z.object({ kind: z.literal("paused_memory"), container_name: z.string() }),
  /** Thaw a paused workload (idempotent: a running one is left as it is). */
  z.object({ kind: z.literal("unpause"), container_name: z.string() }),
  z.object({ kind: z.literal("remove"), container_name: z.string() }),
  z.object({
    kind: z.literal("relay"),
    container_name: z.string(),
    relay_id: z.string(),
    request: z.object({ id: z.string(), input: z.string(), stream: z.boolean() }),
    /** The workspace's session protocol (SessionSpec.session); absent: our adapter contract. */
    protocol: SessionProtocolName.optional(),
    timeout_ms: z.number().int().positive(),
    /** Bytes of the adapter's reply the runner relays at most; past it the relay ends RESOURCE_EXHAUSTED. */
    reply_max_bytes: z
      .number()
      .int()
      .positive()
      .max(1024 * 1024 * 1024)
      .optional(),
  }),
  /**
   * Is the relay path to the workspace's adapter up? The runner holds its adapter token (or
   * recovers it from the workspace's stack), resolves its endpoint and asks its readiness
   * endpoint. The server reports a HarnessSession Ready only after one succeeded.
   */
  z.object({
    kind: z.literal("probe"),
    container_name: z.string(),
    /** As `relay`'s: an `openai-chat` harness is asked `GET /healthz`, ours `GET /readyz`. */
    protocol: SessionProtocolName.optional(),
  }),
  z.object({
    kind: z.literal("cancel_relay"),
    container_name: z.string(),
    relay_id: z.string(),
    request_id: z.string(),
  }),
  /**
   * The whole desired warm-pool set of this runner (runner/sessions/warm-pool.ts): it keeps `size`
   * unclaimed workspaces of each pool provisioned, agent pre-started, and destroys those of pools
   * not listed (or of an older `fingerprint`). Answers at once; filling happens in the background.
   */
  z.object({
    kind: z.literal("warm_pools"),
    pools: z
      .array(
        z.object({
          /** `<namespace>/<agent>`: one pool per Agent (credentials and egress are baked in). */
          pool: z.string().min(1).max(200),
          size: z.number().int().min(0).max(16),
          /** Hash of the spec template and credentials: entries of another one are stale. */
          fingerprint: z.string().min(1).max(128),
          /** The session spec of every entry; the runner gives each its own `name`. */
          template: SessionSpec,
          credentials: z.record(z.string(), z.string()),
          gateway: GatewayGrant.optional(),
        }),
      )
      .max(1000),
  }),
  /** Take one ready entry of a pool (never handed out twice); NOT_FOUND when none is ready. */
  z.object({
    kind: z.literal("claim_warm"),
    pool: z.string().min(1).max(200),
    fingerprint: z.string().min(1).max(128),
  }),
  /**
   * The files API (contracts/workspace-files.ts). `path` is already confined (relative to
   * /workspace); the runner refuses symlinks that lead out. FAILED_PRECONDITION when the workload
   * is not running (a stopped session: resume it first).
   */
  z.object({ kind: z.literal("workspace_list"), container_name: z.string(), path: z.string().max(4096) }),
  /**
   * Streams a file's bytes (`what: file`), a tar of a path (`what: archive`) or a git diff of the
   * checkout at `path` against the commit it was seeded from (`what: diff`) as `relay_chunk`s of
   * base64 under `relay_id` (binary frames when both ends take them, contracts/runner-binary.ts),
   * each at most WORKSPACE_CHUNK_BYTES raw; past `max_bytes` it stops
   * with RESOURCE_EXHAUSTED. Answers `{size}` once the last chunk left.
   */
  z.object({
    kind: z.literal("workspace_read"),
    container_name: z.string(),
    path: z.string().max(4096),
    what: z.enum(["file", "archive", "diff"]),
    relay_id: z.string(),
    max_bytes: z.number().int().positive(),
    /**
     * `what: diff` only, and required there: the commit the workspace was seeded at, as the
     * provision that seeded it returned it (`seeded_commit`) and the server kept it. The runner
     * diffs against this one and never reads a seed ref in the workspace (the agent writes there).
     */
    seeded_commit: SeededCommit.optional(),
  }),
  /**
   * One piece of an upload: the runner appends `data` (base64, at most WORKSPACE_CHUNK_BYTES raw)
   * to a staging file of `upload_id`; `done` writes the whole file into the workspace at once;
   * `abort` drops the staging file. Pieces of one upload come in order (`seq` from 0).
   */
  z.object({
    kind: z.literal("workspace_write"),
    container_name: z.string(),
    path: z.string().max(4096),
    upload_id: z.string().regex(/^[A-Za-z0-9-]{8,64}$/),
    seq: z.number().int().nonnegative(),
    data: z.string().max(2 * 1024 * 1024),
    /**
     * The piece's bytes came raw in the binary frame just before this command, named by its
     * command id (contracts/runner-binary.ts), and `data` is empty. Sent only to a runner that
     * announced binary frames.
     */
    data_frame: z.literal(true).optional(),
    done: z.boolean(),
    abort: z.boolean().optional(),
  }),
  z.object({ kind: z.literal("workspace_delete"), container_name: z.string(), path: z.string().max(4096) }),
  /**
   * Snapshots (contracts/session-snapshot.ts). `snapshot_take` copies the workspace's volume into
   * a new storage `target` on the engine, consistently: relayed requests that arrive meanwhile wait,
   * those in flight are waited for up to `quiesce_ms` (else ABORTED, nothing made). It works with
   * the workload running, paused (left frozen) or scaled to 0. Answers `{size_bytes}` once the copy
   * is whole; the storage's stack is recorded behind, never delaying the answer.
   */
  z.object({
    kind: z.literal("snapshot_take"),
    container_name: z.string(),
    target: SnapshotStorage,
    quiesce_ms: z.number().int().positive().max(600_000),
  }),
  /** Destroys a snapshot's storage and its stack (idempotent: NOT_FOUND never answered). */
  z.object({ kind: z.literal("snapshot_delete"), target: SnapshotStorage }),
  /**
   * Streams a tar of the snapshot's files, every entry under `volume/`, as `relay_chunk`s of
   * base64 under `relay_id` (or binary frames, as `workspace_read`'s; each at most
   * WORKSPACE_CHUNK_BYTES raw); past `max_bytes` it stops
   * with RESOURCE_EXHAUSTED. Answers `{size}` once the last chunk left.
   */
  z.object({
    kind: z.literal("snapshot_read"),
    target: SnapshotStorage,
    relay_id: z.string(),
    max_bytes: z.number().int().positive(),
  }),
  /**
   * One piece of an imported snapshot: an uncompressed tar whose entries the server already
   * checked (only `volume/…` regular files, directories and symlinks that stay inside), appended
   * to a staging file of `upload_id`; `done` makes the storage `target` and extracts it there,
   * answering `{size_bytes}`; `abort` drops the staging file. Pieces come in order (`seq` from 0),
   * several in flight to a runner that announced UPLOAD_WINDOW_CAPABILITY (the last only once every
   * other was answered).
   */
  z.object({
    kind: z.literal("snapshot_write"),
    target: SnapshotStorage,
    upload_id: z.string().regex(/^[A-Za-z0-9-]{8,64}$/),
    seq: z.number().int().nonnegative(),
    data: z.string().max(2 * 1024 * 1024),
    /**
     * The piece's bytes came raw in the binary frame just before this command, named by its
     * command id (contracts/runner-binary.ts), and `data` is empty. Sent only to a runner that
     * announced binary frames.
     */
    data_frame: z.literal(true).optional(),
    done: z.boolean(),
    abort: z.boolean().optional(),
  }),
  /**
   * Replaces the workspace volume's files with the snapshot's (restore in place). The workload
   * must be scaled to 0 first (FAILED_PRECONDITION otherwise): the server stops the session,
   * restores, and brings it back, which resumes the conversation the snapshot holds.
   */
  z.object({ kind: z.literal("snapshot_restore"), container_name: z.string(), source: SnapshotStorage }),
  /**
   * A `snapshot_restore` of `source` into the workspace follows once the server stopped the
   * session: the runner readies what it needs meanwhile (on Kubernetes it starts the copy pod,
   * which copies nothing until the restore) and answers at once. Copies nothing, changes no file;
   * what the restore does not take within a minute is undone.
   */
  z.object({
    kind: z.literal("snapshot_restore_prepare"),
    container_name: z.string(),
    source: SnapshotStorage,
  }),
  /**
   * What the workload uses now (contracts/session-metrics.ts), read from the engine; a paused
   * workload is not thawed for it. FAILED_PRECONDITION when it is not running.
   */
  z.object({ kind: z.literal("session_metrics"), container_name: z.string() }),
  /**
   * One HTTP request to a declared port of the workspace's session (issue 40; contracts/session-ports.ts).
   * The runner relays only to a port the workspace was provisioned with, never the adapter's, at the
   * workload's own address; the reply comes back as `relay_chunk`s under `relay_id`: the first
   * (an envelope) carries `status` and `headers`, the body follows as bytes (binary frames when both
   * ends take them, else base64), the last with `done`. Past `reply_max_bytes` it stops,
   * RESOURCE_EXHAUSTED. Answers `{status}` once the last chunk left.
   */
  z.object({
    kind: z.literal("port_request"),
    container_name: z.string(),
    port: z.number().int().min(1024).max(65535),
    relay_id: z.string(),
    method: z.string().regex(/^[A-Z]{1,16}$/),
    /** The path and query the session sees, from `/`. */
    path: z.string().startsWith("/").max(8192),
    headers: PortHeaders,
    /** The request body, base64 (at most PORT_REQUEST_BODY_MAX_BYTES raw); absent: none. */
    body: z
      .string()
      .max(6 * 1024 * 1024)
      .optional(),
    timeout_ms: z.number().int().positive(),
    reply_max_bytes: z
      .number()
      .int()
      .positive()
      .max(1024 * 1024 * 1024),
  }),
  /**
   * A WebSocket to a declared port (issue 40): the runner opens it at `path`; once open it sends a
   * `relay_chunk` with `status: 101` (and the subprotocol chosen in `headers`), then each message
   * from the session as a `relay_chunk` with `message` (its kind) and `data` base64. A refusal of
   * the upgrade ends the command with the session's HTTP status in the error. The command's
   * result `{code, reason}` comes when the socket closed (either side), after a `done` chunk.
   */
  z.object({
    kind: z.literal("port_socket"),
    container_name: z.string(),
    port: z.number().int().min(1024).max(65535),
    relay_id: z.string(),
    path: z.string().startsWith("/").max(8192),
    headers: PortHeaders,
    protocols: z.array(z.string().max(128)).max(16).default([]),
  }),
  /** One message of the client's to an open port socket (`relay_id`); answered once sent. */
  z.object({
    kind: z.literal("port_socket_send"),
    relay_id: z.string(),
    message: z.enum(["text", "binary"]),
    /** base64, at most PORT_SOCKET_MESSAGE_MAX_BYTES raw. */
    data: z.string().max(2 * 1024 * 1024),
  }),
  /** The client closed its side: the runner closes the session's socket with the code given. */
  z.object({
    kind: z.literal("port_socket_close"),
    relay_id: z.string(),
    code: z.number().int().min(1000).max(4999).optional(),
    reason: z.string().max(123).optional(),
  }),
  /**
   * The session's logs (contracts/session-logs.ts): the workload's output as the engine keeps it
   * and the runner's ring of the agent's stderr, merged by time, the last `tail_lines` after
   * `since_time`, secrets redacted. An observation: a paused workload is not thawed for it.
   */
  z.object({
    kind: z.literal("session_logs"),
    container_name: z.string(),
    tail_lines: z.number().int().min(0).max(10_000),
    since_time: z.string().optional(),
  }),
  /** A one-shot (v1alpha1) run to completion in a fresh container that is removed afterwards. */
  z.object({
    kind: z.literal("run_once"),
    run_id: z.string().regex(/^[a-z0-9][-a-z0-9]{0,62}$/),
    image: DigestPinnedImage,
    /** The runtime's one-shot entry; the image's entrypoint when absent. */
    command: z.array(z.string()).optional(),
    input: z.string().max(64 * 1024),
    /** Plain environment (model URL and name). */
    env: z.record(z.string(), z.string()),
    /** The Agent's allowed credentials only; given to the engine at create time, never logged. */
    credentials: z.record(z.string(), z.string()),
    gateway: GatewayGrant.optional(),
    egress: z.array(EgressRule),
    timeout_ms: z.number().int().positive(),
  }),
]);
export type RunnerCommand = z.infer<typeof RunnerCommand>;

export const ServerToRunner = z.discriminatedUnion("type", [
  z.object({
    version: z.literal(RUNNER_PROTOCOL_VERSION),
    type: z.literal("welcome"),
    payload: z.object({
      runner_id: z.string(),
      heartbeat_ms: z.number().int().positive(),
      /**
       * The runner's own credential, issued once when it registered with the shared runner token
       * (PROTOCOL.md §2): it keeps it (0600) and presents it instead of that token from then on.
       */
      credential: z.string().min(16).max(256).optional(),
      /** What the server takes and sends beyond the base protocol (e.g. binary frames). */
      capabilities: LinkCapabilities.optional(),
    }),
  }),
  z.object({
    version: z.literal(RUNNER_PROTOCOL_VERSION),
    type: z.literal("command"),
    payload: z.object({
      command_id: z.string(),
      command: RunnerCommand,
      /**
       * How long the server waits for the result (PROTOCOL.md §7): the runner stops the command's
       * work past it and answers DEADLINE_EXCEEDED. Absent (an older server): RUNNER_COMMAND_DEADLINE_MS.
       */
      deadline_ms: z.number().int().positive().optional(),
    }),
  }),
  /** The server stopped waiting for a command (its deadline passed): the runner stops its work, answering CANCELLED. */
  z.object({
    version: z.literal(RUNNER_PROTOCOL_VERSION),
    type: z.literal("cancel"),
    payload: z.object({ command_id: z.string() }),
  }),
  z.object({
    version: z.literal(RUNNER_PROTOCOL_VERSION),
    type: z.literal("ping"),
    payload: z.object({ at: z.number() }),
  }),
]);
export type ServerToRunner = z.infer<typeof ServerToRunner>;

export const CommandResult = z.union([
  z.object({ command_id: z.string(), ok: z.literal(true), result: z.record(z.string(), z.unknown()) }),
  z.object({ command_id: z.string(), ok: z.literal(false), error: ApiErrorBody }),
]);
export type CommandResult = z.infer<typeof CommandResult>;

export const GatewayUsageReport = z.object({
  container_name: z.string(),
  /** The relayed request the call belongs to: the one request in flight on the session then; absent when none or several were. */
  relay_id: z.string().optional(),
  agent: z.string(),
  /** The model the provider answered with (else the one asked for). */
  model: z.string().max(256),
  /** As the provider reported it; "unavailable" when its answer carried none (failed, cancelled). */
  usage: Usage,
});
export type GatewayUsageReport = z.infer<typeof GatewayUsageReport>;

export const GatewayRefusal = z.object({
  container_name: z.string(),
  agent: z.string(),
  reason: z.enum(["TokenBudgetExceeded", "RequestRateExceeded", "ModelNotAllowed"]),
  /** What the agent's model call was answered with, for the session's event. */
  message: z.string().max(1024),
});
export type GatewayRefusal = z.infer<typeof GatewayRefusal>;

export const RunnerToServer = z.discriminatedUnion("type", [
  z.object({
    version: z.literal(RUNNER_PROTOCOL_VERSION),
    type: z.literal("hello"),
    payload: z.object({
      runner_name: RunnerName,
      /** How many workspaces it takes (placement never puts more on it). */
      capacity: z.number().int().nonnegative(),
      /** What placement selects on (`runnerSelector`, `runner_selector`). */
      labels: RunnerLabels.default({}),
      engine: z.enum(["docker", "kubernetes"]),
      /** The runner's authoritative set: the server reconciles to it on every (re)attach. */
      sessions: z.array(RunnerSessionReport),
      /** What the runner takes and sends beyond the base protocol (e.g. binary frames). */
      capabilities: LinkCapabilities.optional(),
    }),
  }),
  z.object({
    version: z.literal(RUNNER_PROTOCOL_VERSION),
    type: z.literal("result"),
    payload: CommandResult,
  }),
  z.object({
    version: z.literal(RUNNER_PROTOCOL_VERSION),
    type: z.literal("frame"),
    payload: z.object({ session_id: z.string(), frame: AgentFrame }),
  }),
  z.object({
    version: z.literal(RUNNER_PROTOCOL_VERSION),
    type: z.literal("session_state"),
    payload: z.object({ session_id: z.string(), state: SessionState, reason: z.string().optional() }),
  }),
  z.object({
    version: z.literal(RUNNER_PROTOCOL_VERSION),
    type: z.literal("relay_chunk"),
    payload: z.object({
      relay_id: z.string(),
      data: z.string(),
      done: z.boolean(),
      status: z.number().int().optional(),
      /** A port relay's (issue 40): the session's reply headers, on the chunk carrying `status`. */
      headers: PortHeaders.optional(),
      /** A port socket's (issue 40): one message from the session, `data` base64. */
      message: z.enum(["text", "binary"]).optional(),
    }),
  }),
  z.object({
    version: z.literal(RUNNER_PROTOCOL_VERSION),
    type: z.literal("pong"),
    payload: z.object({ at: z.number() }),
  }),
  /** One model call a session made through the runner's gateway, with the provider's own usage. */
  z.object({
    version: z.literal(RUNNER_PROTOCOL_VERSION),
    type: z.literal("gateway_usage"),
    payload: GatewayUsageReport,
  }),
  /** The gateway refused a session's model call (over a budget, a model not allowed). */
  z.object({
    version: z.literal(RUNNER_PROTOCOL_VERSION),
    type: z.literal("gateway_refused"),
    payload: GatewayRefusal,
  }),
  /** One MCP tool call a session made through the runner's gateway (allowed or refused: contracts/mcp.ts). */
  z.object({
    version: z.literal(RUNNER_PROTOCOL_VERSION),
    type: z.literal("gateway_tool_call"),
    payload: GatewayToolCall,
  }),
]);
export type RunnerToServer = z.infer<typeof RunnerToServer>;
