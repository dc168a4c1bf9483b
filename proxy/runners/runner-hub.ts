import type { IncomingMessage } from "node:http";
import type { GatewayToolCall } from "../../contracts/mcp.ts";
import type { Duplex } from "node:stream";
import { type RawData, WebSocketServer } from "ws";
import { BINARY_FRAMES_CAPABILITY, BinaryKind, decodeBinaryFrame } from "../../contracts/runner-binary.ts";
import { type ApiErrorBody, describeZodError, httpStatusOf } from "../../contracts/errors.ts";
import {
  type Admission,
  type DialOutcome,
  inProcessLink,
  type LinkChannel,
} from "../../contracts/runner-channel.ts";
import {
  type GatewayRefusal,
  type GatewayUsageReport,
  RUNNER_LINK_MAX_FRAME_BYTES,
  RUNNER_PROTOCOL_VERSION,
  type RunnerCommand,
  type RunnerSessionReport,
  type RunnerToServer,
  UPLOAD_WINDOW_CAPABILITY,
  UPLOAD_WINDOW_PIECES,
} from "../../contracts/runner-protocol.ts";
import { type CommandResultOf, CommandResultSchemas } from "../../contracts/runner-results.ts";
import { type ReplicaCluster, singleReplica } from "../cluster/replica-cluster.ts";
import { FrameBudget, type FrameBudgetLimits } from "./frame-budget.ts";
import type { GatewayReport, GatewayReportListener } from "../lifecycle/gateway-reports.ts";
import { stalledTick } from "../../contracts/awake-deadline.ts";
import { missedHeartbeats } from "./heartbeat.ts";
import type { KeyedLock } from "../lifecycle/keyed-mutex.ts";
import { type Logger, silentLogger } from "../observability/log.ts";
import type { CommandOutcome, RelayChunk } from "../lifecycle/runner-directory.ts";
import { RunnerConnection } from "./runner-connection.ts";
import { RunnerReconciler } from "./runner-reconciler.ts";
import {
  admitHello,
  authenticateRunner,
  type RunnerIdentity,
  type RunnerRegistration,
} from "./runner-identity.ts";
import type { SessionJournal } from "../lifecycle/session-journal.ts";
import type { RunnerRecord, Store } from "../store/store.ts";
import { CloseCodes, parseEnvelope, rawByteLength, rejectUpgrade } from "./runner-wire.ts";
import {
  channelRunnerSocket,
  type RunnerSocket,
  type RunnerSocketEvents,
  webSocketRunnerSocket,
} from "./runner-socket.ts";

export const RUNNER_CONNECT_PATH = "/v1/runners/connect";

export type RunnerHubOptions = {
  store: Store;
  journal: SessionJournal;
  adminToken: string;
  runnerToken: string;
  /** Settings (their defaults are proxy/config.ts's). */
  heartbeatMs: number;
  reattachWindowMs: number;
  /** Default deadline of `command()`. */
  commandTimeoutMs: number;
  /** A connection must say `hello` within this. @default 10000 */
  helloTimeoutMs?: number;
  /** The most workspaces a runner may claim to take in its `hello`; more is cut to this. */
  maxRunnerCapacity: number;
  /** Whether the runner token registers new runner names (runner-identity.ts). */
  registration: RunnerRegistration;
  /** Per-session budget of frames from runners, before their store writes (frame-budget.ts). */
  frameBudget?: Partial<FrameBudgetLimits>;
  /**
   * The other server replicas over the same database: runners attached to them are connected
   * too, and commands for them are forwarded there. @default singleReplica() (this process alone)
   */
  cluster?: ReplicaCluster;
  log?: Logger;
};

/**
 * Store writes one connection may have queued before the server stops reading its socket (the
 * runner's send buffer then fills and its agents wait: backpressure to the exec streams), and
 * the depth at which reading resumes.
 */
const INBOX_PAUSE_AT = 1_000;
const INBOX_RESUME_AT = 100;

/**
 * The server's end of the runner link (see PROTOCOL.md). Runners dial in; the hub registers them
 * on `hello` and reconciles the store to their authoritative session set; sends commands and
 * resolves their results as values; stores and publishes the frames and session states runners
 * send; detects lost links by heartbeats; runs the reattach window of each lost runner.
 */
export class RunnerHub {
  readonly #store: Store;
  readonly #tokens: { adminToken: string; runnerToken: string };
  readonly #heartbeatMs: number;
  /** When #tick last ran: a tick much later than an interval after it finds the server stalled. */
  #lastTickAt = 0;
  readonly #commandTimeoutMs: number;
  readonly #helloTimeoutMs: number;
  readonly #maxRunnerCapacity: number;
  readonly #registration: RunnerRegistration;
  readonly #log: Logger;
  readonly #wss: WebSocketServer;
  /** Every open socket, attached or not (heartbeats). */
  readonly #sockets = new Set<RunnerConnection>();
  /**
   * Each connection's inbox (its store writes in arrival order) while it has work: `close` waits
   * for them, so no write of a link that just closed runs after the store is closed (on
   * PostgreSQL each is a round trip, and a closed pool refuses it).
   */
  readonly #inboxes = new Set<Promise<void>>();
  /** The current connection of each attached runner. */
  readonly #connections = new Map<string, RunnerConnection>();
  /** The store's sessions following what runners say, and each lost runner's reattach window. */
  readonly #sessions: RunnerReconciler;
  readonly #relays = new Map<string, (chunk: RelayChunk) => void>();
  /** The runner each relayed request was sent to: only it may send that request's chunks. */
  readonly #relayRunners = new Map<string, string>();
  /** The workspace each relayed request went to: its gateway reports name it. */
  readonly #relayWorkspaces = new Map<string, string>();
  readonly #relayUsage = new Map<string, (report: GatewayUsageReport) => void>();
  readonly #gatewayListeners = new Set<GatewayReportListener>();
  /** Attach, detach and expiry of one runner never interleave. */
  readonly #runnerMutex: KeyedLock;
  readonly #heartbeat: NodeJS.Timeout;
  readonly #attachListeners = new Set<(runner: RunnerRecord, reported: RunnerSessionReport[]) => void>();
  /**
   * Settled sessions a stop was sent for and not yet answered (`runner id \0 session id`). The
   * runner reports STOPPING while it stops, which reads as "still runs": one stop at a time, or
   * each report would send another (a loop that flooded a runner with thousands in CI).
   */
  readonly #stopsInFlight = new Set<string>();
  readonly #frameBudget: FrameBudget;
  readonly #cluster: ReplicaCluster;
  #sweeping: Promise<void> | undefined;
  #closing = false;

  constructor(options: RunnerHubOptions) {
    this.#store = options.store;
    this.#tokens = { adminToken: options.adminToken, runnerToken: options.runnerToken };
    this.#heartbeatMs = options.heartbeatMs;
    this.#commandTimeoutMs = options.commandTimeoutMs;
    this.#helloTimeoutMs = options.helloTimeoutMs ?? 10_000;
    this.#maxRunnerCapacity = options.maxRunnerCapacity;
    this.#registration = options.registration;
    this.#log = options.log ?? silentLogger;
    this.#frameBudget = new FrameBudget(options.frameBudget);
    this.#cluster = options.cluster ?? singleReplica();
    // Across replicas too: a runner redialing another replica is attached there after (or
    // before) its old link here is detached, never in between.
    this.#runnerMutex = this.#cluster.locks("runners");
    this.#wss = new WebSocketServer({ noServer: true, maxPayload: RUNNER_LINK_MAX_FRAME_BYTES });
    this.#sessions = new RunnerReconciler({
      store: this.#store,
      journal: options.journal,
      reattachWindowMs: options.reattachWindowMs,
      runnerMutex: this.#runnerMutex,
      hasLink: (runnerId) => this.#connections.has(runnerId) || this.#cluster.remoteLinks().has(runnerId),
      stopOnRunner: (runnerId, sessionId) => this.#stopOnRunner(runnerId, sessionId),
      log: this.#log,
    });
    this.#lastTickAt = Date.now();
    this.#heartbeat = setInterval(() => this.#tick(), this.#heartbeatMs);
    // Commands another replica forwards for a runner attached here run on its link here.
    this.#cluster.serveForwarded(async ({ runnerId, command, timeoutMs, onChunk }) => {
      const relayId = relayIdOf(command);
      // The replicas speak JSON: a binary frame's bytes go on as base64.
      const unsubscribe =
        relayId !== undefined
          ? this.onRelayChunk(relayId, (chunk) =>
              onChunk(
                chunk.bytes ? { ...chunk, data: chunk.bytes.toString("base64"), bytes: undefined } : chunk,
              ),
            )
          : undefined;
      try {
        return await this.#commandHere(runnerId, command, timeoutMs);
      } finally {
        unsubscribe?.();
      }
    });
  }

  /**
   * The node server's `upgrade` event: authenticate with the runner token or a runner's own
   * credential (runner-identity.ts), then hand over to ws.
   */
  handleUpgrade(request: IncomingMessage, socket: Duplex, head: Buffer): void {
    this.#authenticate(request).then(
      (outcome) => {
        if (socket.destroyed) return;
        if (!outcome.ok) rejectUpgrade(socket, outcome.error);
        else
          this.#wss.handleUpgrade(request, socket, head, (ws) =>
            this.#onConnection((events) => webSocketRunnerSocket(ws, events), outcome.identity),
          );
      },
      (error: unknown) => {
        this.#log("error", "runner link: authentication failed", { error: String(error) });
        if (!socket.destroyed)
          rejectUpgrade(socket, {
            code: "UNAVAILABLE",
            message: "the server could not check the credential",
          });
      },
    );
  }

  /**
   * `serve`'s embedded runner dials here instead of over loopback (contracts/runner-channel.ts):
   * its bearer is checked exactly as on the upgrade, and a refusal carries the status the upgrade
   * would have got. From there the link is the same as a WebSocket's: hello, attach, commands,
   * heartbeats, backpressure, close and the reattach window.
   */
  async dialInProcess(bearer: string): Promise<DialOutcome> {
    const { runner, server } = inProcessLink();
    const admitted = await this.admitChannel(bearer, server);
    return admitted.ok ? { ok: true, channel: runner } : admitted;
  }

  /**
   * The same for a runner end elsewhere (`serve`'s embedded runner in a worker thread): `server` is
   * the server's end of a link the caller made (contracts/runner-port-channel.ts); refused, the
   * caller closes it.
   */
  async admitChannel(bearer: string, server: LinkChannel): Promise<Admission> {
    const refuse = (error: ApiErrorBody): Admission => ({
      ok: false,
      status: httpStatusOf[error.code],
      error,
    });
    if (this.#closing) return refuse({ code: "UNAVAILABLE", message: "the server is shutting down" });
    const outcome = await authenticateRunner(
      `Bearer ${bearer}`,
      this.#tokens,
      this.#store,
      this.#registration,
    ).catch((error: unknown) => {
      this.#log("error", "runner link: authentication failed", { error: String(error) });
      return {
        ok: false as const,
        error: { code: "UNAVAILABLE" as const, message: "the server could not check the credential" },
      };
    });
    if (!outcome.ok) return refuse(outcome.error);
    if (this.#closing) return refuse({ code: "UNAVAILABLE", message: "the server is shutting down" });
    this.#onConnection((events) => channelRunnerSocket(server, events), outcome.identity);
    return { ok: true };
  }

  async #authenticate(
    request: IncomingMessage,
  ): Promise<{ ok: true; identity: RunnerIdentity } | { ok: false; error: ApiErrorBody }> {
    const path = new URL(request.url ?? "/", "http://localhost").pathname;
    if (path !== RUNNER_CONNECT_PATH)
      return { ok: false, error: { code: "NOT_FOUND", message: `no WebSocket at ${path}` } };
    if (this.#closing)
      return { ok: false, error: { code: "UNAVAILABLE", message: "the server is shutting down" } };
    return authenticateRunner(request.headers.authorization, this.#tokens, this.#store, this.#registration);
  }

  /**
   * A runner's credential was replaced or revoked (runner admin API): links that still speak with
   * an older one are closed (4003); the runner has to come back with its new credential.
   */
  closeLinksOf(runnerName: string, keepTokenHash?: string): void {
    for (const connection of this.#sockets) {
      const { identity } = connection;
      if (identity.kind !== "credential" || identity.runnerName !== runnerName) continue;
      if (identity.tokenHash === keepTokenHash) continue;
      this.#log("warn", "runner link closed: its credential was replaced or revoked", {
        runner_name: runnerName,
      });
      connection.close(CloseCodes.identityRefused, "runner credential revoked");
    }
  }

  /** Runners attached and reconciled, ready for commands: here, and to the other live replicas. */
  connectedRunners(): RunnerRecord[] {
    const here = [...this.#connections.values()].flatMap((c) => (c.available && c.runner ? [c.runner] : []));
    const ids = new Set(here.map((r) => r.runner_id));
    for (const [runnerId, link] of this.#cluster.remoteLinks())
      if (!ids.has(runnerId)) here.push(link.runner);
    return here;
  }

  isConnected(runnerId: string): boolean {
    return this.#connections.get(runnerId)?.available === true || this.#cluster.remoteLinks().has(runnerId);
  }

  /**
   * How many pieces of one upload may be in flight to the runner (PROTOCOL.md §7): the window
   * when its `hello` announced UPLOAD_WINDOW_CAPABILITY on a link of this replica, else 1 (an
   * older runner; a runner on another replica, whose forwarded commands could overtake each
   * other between the replicas).
   */
  uploadWindow(runnerId: string): number {
    const connection = this.#connections.get(runnerId);
    return connection?.available === true && connection.uploadWindow ? UPLOAD_WINDOW_PIECES : 1;
  }

  /** The drain flag changed in the store: connected runners report it from now on. */
  noteDraining(runnerId: string, draining: boolean): void {
    const connection = this.#connections.get(runnerId);
    if (connection?.runner) connection.runner = { ...connection.runner, draining };
  }

  /**
   * Told each time a runner is attached and reconciled (it may take work waiting for a runner),
   * with the sessions its hello reported (whose workloads are frozen, for the paused tier).
   */
  onRunnerAttached(listener: (runner: RunnerRecord, reported: RunnerSessionReport[]) => void): () => void {
    this.#attachListeners.add(listener);
    return () => this.#attachListeners.delete(listener);
  }

  /**
   * Send a command to a runner and wait for its typed result. Never throws: an absent runner is
   * UNAVAILABLE, a missed deadline DEADLINE_EXCEEDED, a lost link UNAVAILABLE.
   */
  async command<C extends RunnerCommand>(
    runnerId: string,
    command: C,
    timeoutMs: number = this.#commandTimeoutMs,
    bulk?: Uint8Array,
  ): Promise<CommandOutcome<C>> {
    const remote = this.#connections.get(runnerId)?.available
      ? undefined
      : this.#cluster.remoteLinks().get(runnerId);
    if (remote === undefined) return this.#commandHere(runnerId, command, timeoutMs, bulk);
    // Attached to another replica: the command runs there, its relay chunks come back here.
    const relayId = relayIdOf(command);
    const outcome = await this.#cluster.forward(remote.replicaId, {
      runnerId,
      // The replicas speak JSON: an upload piece's bytes go as base64.
      command:
        bulk !== undefined && (command.kind === "workspace_write" || command.kind === "snapshot_write")
          ? { ...command, data: Buffer.from(bulk).toString("base64") }
          : command,
      timeoutMs,
      onChunk: (chunk) => {
        if (relayId !== undefined && chunk.relay_id === relayId) this.#relays.get(relayId)?.(chunk);
      },
    });
    return this.#typed(runnerId, command, outcome);
  }

  /** A command over this replica's own link to the runner. */
  async #commandHere<C extends RunnerCommand>(
    runnerId: string,
    command: C,
    timeoutMs: number,
    bulk?: Uint8Array,
  ): Promise<CommandOutcome<C>> {
    const connection = this.#connections.get(runnerId);
    if (!connection?.available)
      return { ok: false, error: { code: "UNAVAILABLE", message: `runner ${runnerId} is not connected` } };
    // Chunks of a relayed request (or a workspace download) are taken from the runner it went to, and from no other.
    const relayId = relayIdOf(command);
    if (relayId !== undefined) this.#relayRunners.set(relayId, runnerId);
    if (command.kind === "relay") this.#relayWorkspaces.set(command.relay_id, command.container_name);
    const outcome = await connection.request(command, timeoutMs, bulk);
    if (relayId !== undefined && this.#relayRunners.get(relayId) === runnerId) {
      this.#relayRunners.delete(relayId);
      this.#relayWorkspaces.delete(relayId);
    }
    return this.#typed(runnerId, command, outcome);
  }

  /** A runner's result checked against its command's result schema. */
  #typed<C extends RunnerCommand>(
    runnerId: string,
    command: C,
    outcome: { ok: true; result: unknown } | { ok: false; error: ApiErrorBody },
  ): CommandOutcome<C> {
    if (!outcome.ok) return outcome;
    const parsed = CommandResultSchemas[command.kind].safeParse(outcome.result);
    if (!parsed.success)
      return {
        ok: false,
        error: {
          code: "INTERNAL",
          message: `runner ${runnerId} returned an invalid ${command.kind} result: ${describeZodError(parsed.error)}`,
        },
      };
    return { ok: true, result: parsed.data as CommandResultOf<C["kind"]> };
  }

  /** Receive the `relay_chunk`s of one relayed request until unsubscribed. */
  onRelayChunk(relayId: string, listener: (chunk: RelayChunk) => void): () => void {
    this.#relays.set(relayId, listener);
    return () => {
      if (this.#relays.get(relayId) === listener) this.#relays.delete(relayId);
    };
  }

  /**
   * Receive the gateway's usage reports of one relayed request (their `relay_id`) until
   * unsubscribed. Told as the message arrives, before any later message of the link is handled:
   * the runner sends a call's usage before the relay's final chunk, so a reply that ends has
   * its usage here already. Only reports from the runner the request was sent to, naming the
   * workspace it went to. A request relayed through another replica's link is not told.
   */
  onRelayUsage(relayId: string, listener: (report: GatewayUsageReport) => void): () => void {
    this.#relayUsage.set(relayId, listener);
    return () => {
      if (this.#relayUsage.get(relayId) === listener) this.#relayUsage.delete(relayId);
    };
  }

  /** Told of every gateway report a runner sent for a workspace it owns (gateway-reports.ts). */
  onGatewayReport(listener: GatewayReportListener): () => void {
    this.#gatewayListeners.add(listener);
    return () => this.#gatewayListeners.delete(listener);
  }

  /** After a server (re)start: sessions of runners not attached become DISCONNECTED (runner-reconciler.ts). */
  recover(): Promise<void> {
    return this.#sessions.recover();
  }

  /** Close every runner link (they reconnect with backoff to the next server) and stop all timers. */
  async close(): Promise<void> {
    this.#closing = true;
    clearInterval(this.#heartbeat);
    this.#sessions.close();
    for (const connection of this.#sockets) {
      connection.failAll({ code: "UNAVAILABLE", message: "the server is shutting down" });
      connection.close(CloseCodes.goingAway, "server shutting down");
    }
    await new Promise<void>((resolve) => this.#wss.close(() => resolve()));
    await Promise.allSettled([...this.#inboxes]);
    await this.#sweeping;
  }

  // ── one connection ───────────────────────────────────────────────────────────────────────

  #onConnection(open: (events: RunnerSocketEvents) => RunnerSocket, identity: RunnerIdentity): void {
    // The link's events reach the handlers below, which close over `connection`.
    const socket = open({
      message: (data, isBinary) => onMessage(data, isBinary),
      error: (error) => this.#log("warn", "runner link: socket error", { error: error.message }),
      close: (code) => onClose(code),
    });
    const connection = new RunnerConnection(socket, Date.now(), identity);
    this.#sockets.add(connection);
    const helloTimer = setTimeout(() => {
      if (!connection.helloSeen) connection.close(CloseCodes.helloExpected, "hello expected");
    }, this.#helloTimeoutMs);
    // Store writes of one connection happen in arrival order (frames keep their order), and
    // at most INBOX_PAUSE_AT wait: beyond that the socket is not read until they drain.
    let queue: Promise<void> = Promise.resolve();
    let queued = 0;
    const enqueue = (what: string, task: () => Promise<void>) => {
      if (++queued >= INBOX_PAUSE_AT && !socket.isPaused) socket.pause();
      const previous = queue;
      queue = queue
        .then(task)
        .catch((error: unknown) => {
          this.#log("error", `runner link: ${what} failed`, { error: String(error) });
        })
        .finally(() => {
          if (--queued <= INBOX_RESUME_AT && socket.isPaused) socket.resume();
        });
      this.#inboxes.delete(previous);
      const tail = queue;
      this.#inboxes.add(tail);
      void tail.then(() => this.#inboxes.delete(tail));
    };
    /** PROTOCOL.md §9: a download's piece as raw bytes, from a runner that announced them. */
    const onBinary = (data: RawData): void => {
      const bytes = Array.isArray(data)
        ? Buffer.concat(data)
        : data instanceof ArrayBuffer
          ? Buffer.from(data)
          : data;
      const parsed = connection.binary
        ? decodeBinaryFrame(bytes)
        : { ok: false as const, reason: "binary frames from a runner that did not announce them" };
      if (parsed.ok && parsed.frame.kind !== BinaryKind.relayChunk) {
        this.#log("warn", "runner link: invalid message", {
          reason: "binary frame: command data from a runner",
        });
        return;
      }
      if (!parsed.ok) {
        this.#log("warn", "runner link: invalid message", { reason: parsed.reason });
        return;
      }
      const { id: relayId, data: chunk, done } = parsed.frame;
      const owner = this.#relayRunners.get(relayId);
      if (owner === undefined || owner !== connection.runner?.runner_id) {
        this.#log("warn", "runner sent a relay chunk for a request not sent to it; dropped", {
          runner_id: connection.runner?.runner_id,
          relay_id: relayId,
        });
        return;
      }
      this.#relays.get(relayId)?.({ relay_id: relayId, data: "", bytes: chunk, done });
    };
    const onMessage = (data: RawData | string, isBinary: boolean) => {
      connection.lastSeenAt = Date.now();
      // Only after hello: before it a binary message is as invalid as any other non-hello.
      if (isBinary && connection.helloSeen && typeof data !== "string") return onBinary(data);
      const message = parseEnvelope(data, isBinary);
      if (!message.ok) {
        this.#log("warn", "runner link: invalid message", { reason: message.reason });
        if (message.commandId)
          connection.fail(message.commandId, {
            code: "INTERNAL",
            message: `the runner sent an invalid result: ${message.reason}`,
          });
        if (!connection.helloSeen) connection.close(CloseCodes.policyViolation, "invalid message");
        return;
      }
      const envelope = message.envelope;
      if (!connection.helloSeen && envelope.type !== "hello") {
        connection.close(CloseCodes.helloExpected, "hello expected first");
        return;
      }
      switch (envelope.type) {
        case "hello":
          if (connection.helloSeen) {
            this.#log("warn", "runner link: second hello ignored", {
              runner_id: connection.runner?.runner_id,
            });
            return;
          }
          connection.helloSeen = true;
          connection.binary = envelope.payload.capabilities?.includes(BINARY_FRAMES_CAPABILITY) === true;
          connection.uploadWindow =
            envelope.payload.capabilities?.includes(UPLOAD_WINDOW_CAPABILITY) === true;
          clearTimeout(helloTimer);
          enqueue("attach", async () => {
            try {
              const admission = await admitHello(
                connection.identity,
                envelope.payload.runner_name,
                this.#store,
              );
              if (!admission.ok) {
                // Nothing of the runner that holds the name is touched: not its record, link or sessions.
                this.#log("warn", "runner link refused: not that runner", {
                  runner_name: envelope.payload.runner_name,
                  reason: admission.reason,
                });
                connection.close(CloseCodes.identityRefused, "runner identity refused");
                return;
              }
              connection.identity = admission.identity;
              await this.#attach(connection, envelope.payload, admission.issued);
            } catch (error) {
              connection.close(CloseCodes.internalError, "attach failed"); // the runner redials
              throw error;
            }
          });
          return;
        case "result":
          if (!connection.settle(envelope.payload))
            this.#log("warn", "runner link: result for no waiting command", {
              command_id: envelope.payload.command_id,
            });
          return;
        case "frame": {
          // The budget is checked before the frame costs a store write (frame-budget.ts); it is
          // kept per runner and session, so frames another runner sends for a session (dropped
          // below: not its own) never spend the owner's budget.
          const { session_id, frame } = envelope.payload;
          const account = `${connection.runner?.runner_id ?? ""}/${session_id}`;
          const admission = this.#frameBudget.admit(account, rawByteLength(data), Date.now());
          if (admission === "drop") return;
          if (admission === "notice")
            this.#log("warn", "runner link: a session's frames exceed the budget; dropping", {
              runner_id: connection.runner?.runner_id,
              session_id,
            });
          const stored = admission === "notice" ? this.#frameBudget.notice() : frame;
          enqueue("frame", () => this.#sessions.onFrame(connection.runner?.runner_id, session_id, stored));
          return;
        }
        case "session_state":
          enqueue("session_state", () =>
            this.#sessions.onSessionState(connection.runner?.runner_id, envelope.payload),
          );
          return;
        case "relay_chunk": {
          const relayId = envelope.payload.relay_id;
          const owner = this.#relayRunners.get(relayId);
          if (owner === undefined || owner !== connection.runner?.runner_id) {
            this.#log("warn", "runner sent a relay chunk for a request not sent to it; dropped", {
              runner_id: connection.runner?.runner_id,
              relay_id: relayId,
            });
            return;
          }
          this.#relays.get(relayId)?.(envelope.payload);
          return;
        }
        case "pong":
          return;
        case "gateway_usage": {
          const report = envelope.payload;
          const runnerId = connection.runner?.runner_id;
          // The request's own count, at once (its final chunk may be the next message).
          if (
            report.relay_id !== undefined &&
            runnerId !== undefined &&
            this.#relayRunners.get(report.relay_id) === runnerId &&
            this.#relayWorkspaces.get(report.relay_id) === report.container_name
          )
            this.#relayUsage.get(report.relay_id)?.(report);
          enqueue("gateway_usage", () => this.#gatewayReport(runnerId, { kind: "usage", report }));
          return;
        }
        case "gateway_refused": {
          const refusal = envelope.payload;
          const runnerId = connection.runner?.runner_id;
          enqueue("gateway_refused", () => this.#gatewayReport(runnerId, { kind: "refused", refusal }));
          return;
        }
        case "gateway_tool_call": {
          const call = envelope.payload;
          const runnerId = connection.runner?.runner_id;
          enqueue("gateway_tool_call", () => this.#gatewayReport(runnerId, { kind: "tool", call }));
          return;
        }
        default: {
          const exhaustive: never = envelope;
          return exhaustive;
        }
      }
    };
    const onClose = (code: number) => {
      clearTimeout(helloTimer);
      this.#sockets.delete(connection);
      this.#log("info", "runner link closed", { runner_id: connection.runner?.runner_id, code });
      enqueue("detach", async () => {
        const runnerId = connection.runner?.runner_id;
        if (runnerId === undefined || this.#closing) {
          connection.failAll({ code: "UNAVAILABLE", message: "runner link lost" });
          return;
        }
        await this.#runnerMutex.run(runnerId, () => this.#detach(connection));
      });
    };
  }

  /**
   * A gateway report is taken only for a workspace the sending runner owns (as frames and
   * session states are only for its own sessions); any other is dropped, nothing changed.
   */
  async #gatewayReport(
    runnerId: string | undefined,
    message:
      | { kind: "usage"; report: GatewayUsageReport }
      | { kind: "refused"; refusal: GatewayRefusal }
      | { kind: "tool"; call: GatewayToolCall },
  ): Promise<void> {
    const containerName =
      message.kind === "usage"
        ? message.report.container_name
        : message.kind === "refused"
          ? message.refusal.container_name
          : message.call.container_name;
    // Narrowly (a report comes with every model call): the runner it is placed on, its Agent.
    const workspace = await this.#store.getRelayRoute(containerName);
    if (!workspace || workspace.runner_id !== runnerId) {
      this.#log("warn", "runner reported gateway use for a workspace not placed on it; dropped", {
        runner_id: runnerId,
        container_name: containerName,
        type: `gateway_${message.kind === "tool" ? "tool_call" : message.kind}`,
      });
      return;
    }
    const report: GatewayReport =
      message.kind === "usage"
        ? { kind: "usage", workspace, report: message.report }
        : message.kind === "refused"
          ? { kind: "refused", workspace, refusal: message.refusal }
          : { kind: "tool", workspace, call: message.call };
    for (const listener of this.#gatewayListeners) {
      try {
        await listener(report);
      } catch (error) {
        this.#log("error", "gateway report listener failed", { error: String(error) });
      }
    }
  }

  /** PROTOCOL.md §2: register, supersede an older link, welcome, reconcile, then accept commands. */
  async #attach(
    connection: RunnerConnection,
    hello: Extract<RunnerToServer, { type: "hello" }>["payload"],
    issuedCredential: string | undefined,
  ): Promise<void> {
    if (hello.capacity > this.#maxRunnerCapacity)
      this.#log("warn", "runner claimed more capacity than the server allows; cut", {
        runner_name: hello.runner_name,
        claimed: hello.capacity,
        max: this.#maxRunnerCapacity,
      });
    const runner = await this.#store.registerRunner({
      runner_name: hello.runner_name,
      engine: hello.engine,
      capacity: Math.min(hello.capacity, this.#maxRunnerCapacity),
      labels: hello.labels,
    });
    connection.runner = runner;
    const id = runner.runner_id;
    // A credential issued for a link that never got its welcome frees the name for the next try.
    const unissue = async () => {
      if (issuedCredential !== undefined && connection.identity.kind === "credential")
        await this.#store.deleteRunnerCredential(runner.runner_name, connection.identity.tokenHash);
    };
    const nothingToDo = { toStop: [], toRemove: [] };
    const reconciled = await this.#runnerMutex.run(id, async () => {
      const previous = this.#connections.get(id);
      if (previous && previous !== connection) {
        previous.close(CloseCodes.superseded, "superseded by a newer connection");
        await this.#detach(previous);
      }
      if (!connection.socket.open) {
        await unissue();
        return nothingToDo;
      }
      this.#connections.set(id, connection);
      this.#sessions.cancelExpiry(id);
      // Before its sessions are reconciled: no other replica's sweep takes them for stranded.
      await this.#cluster.linkAttached(id);
      const welcomed = await connection.send({
        version: RUNNER_PROTOCOL_VERSION,
        type: "welcome",
        payload: {
          runner_id: id,
          heartbeat_ms: this.#heartbeatMs,
          capabilities: [BINARY_FRAMES_CAPABILITY, UPLOAD_WINDOW_CAPABILITY],
          ...(issuedCredential !== undefined ? { credential: issuedCredential } : {}),
        },
      });
      if (!welcomed.ok) {
        await unissue();
        return nothingToDo;
      }
      const todo = await this.#sessions.reconcile(id, hello.sessions);
      connection.available = true;
      this.#log("info", "runner attached", {
        runner_id: id,
        runner_name: runner.runner_name,
        engine: runner.engine,
        capacity: runner.capacity,
        labels: runner.labels,
        draining: runner.draining,
        sessions: hello.sessions.length,
      });
      return todo;
    });
    for (const sessionId of reconciled.toStop) this.#stopOnRunner(id, sessionId);
    for (const containerName of reconciled.toRemove) this.#removeOnRunner(id, containerName);
    if (connection.available)
      for (const listener of this.#attachListeners) {
        try {
          listener(runner, hello.sessions);
        } catch (error) {
          this.#log("error", "runner attach listener failed", { error: String(error) });
        }
      }
  }

  /** Sessions of a lost link become DISCONNECTED, then its waiting commands fail (in that order). */
  async #detach(connection: RunnerConnection): Promise<void> {
    if (connection.detached) return;
    connection.detached = true;
    connection.available = false;
    const id = connection.runner?.runner_id;
    const current = id !== undefined && this.#connections.get(id) === connection;
    // Already attached to another replica (it redialed there): its sessions are that link's now.
    let movedAway = false;
    if (id !== undefined && current) {
      this.#connections.delete(id);
      await this.#cluster.linkDetached(id);
      if (this.#cluster.shared) await this.#cluster.refreshLinks();
      movedAway = this.#cluster.remoteLinks().has(id);
      if (!movedAway) await this.#sessions.disconnect(id);
    }
    connection.failAll({ code: "UNAVAILABLE", message: "runner link lost" });
    if (id !== undefined && current && !movedAway) this.#sessions.armExpiry(id);
  }

  /** A workspace of the runner's own that the store no longer holds (runner-reconciler.ts): removed there. */
  #removeOnRunner(runnerId: string, containerName: string): void {
    this.command(runnerId, { kind: "remove", container_name: containerName }).then(
      (outcome) => {
        if (!outcome.ok && outcome.error.code !== "NOT_FOUND")
          this.#log("warn", "removing a workspace the server no longer holds failed", {
            runner_id: runnerId,
            container_name: containerName,
            error: outcome.error,
          });
      },
      (error: unknown) => this.#log("error", "remove command threw", { error: String(error) }),
    );
  }

  /** A settled session still runs on its runner: stop it there; the store keeps what it has. */
  #stopOnRunner(runnerId: string, sessionId: string): void {
    const key = `${runnerId}\0${sessionId}`;
    if (this.#stopsInFlight.has(key)) return;
    this.#stopsInFlight.add(key);
    this.command(runnerId, { kind: "stop", session_id: sessionId })
      .finally(() => this.#stopsInFlight.delete(key))
      .then(
        (outcome) => {
          if (!outcome.ok && outcome.error.code !== "NOT_FOUND")
            this.#log("warn", "stopping a settled session on its runner failed", {
              runner_id: runnerId,
              session_id: sessionId,
              error: outcome.error,
            });
        },
        (error: unknown) => this.#log("error", "stop command threw", { error: String(error) }),
      );
  }

  /**
   * PROTOCOL.md §4: ping every interval; two missed heartbeats end the link. A tick that comes
   * late by more than an interval means this process did not run meanwhile (a paused machine, a
   * starved host): its runners could not be heard either, and the messages they sent wait behind
   * this timer. The silence is theirs only from the time the server ran: their last-seen times
   * move on by the stall.
   */
  #tick(): void {
    const now = Date.now();
    const stalled = stalledTick(this.#lastTickAt, now, this.#heartbeatMs);
    this.#lastTickAt = now;
    if (stalled > 0) {
      this.#log(
        "warn",
        "the server did not run for a while (paused or starved); its runners are not blamed",
        {
          stalled_ms: stalled,
        },
      );
      for (const connection of this.#sockets) connection.lastSeenAt += stalled;
    }
    // Replicas over one database: the lease holder finds sessions whose replica died with the link.
    // Not right after a stall: the other replicas (on the same stopped machine, perhaps) get an
    // interval to beat again before their silence is taken for death.
    if (this.#cluster.shared && this.#cluster.leads() && !this.#closing && stalled === 0)
      this.#sweeping ??= this.#cluster
        .refreshLinks()
        .then(() => this.#sessions.sweep())
        .catch((error: unknown) =>
          this.#log("error", "sweeping sessions of lost replicas failed", { error: String(error) }),
        )
        .finally(() => {
          this.#sweeping = undefined;
        });
    for (const connection of this.#sockets) {
      if (missedHeartbeats(connection.lastSeenAt, now, this.#heartbeatMs) >= 2) {
        this.#log("warn", "runner missed 2 heartbeats; link closed", {
          runner_id: connection.runner?.runner_id,
        });
        connection.socket.terminate();
        continue;
      }
      if (!connection.helloSeen) continue;
      connection.send({ version: RUNNER_PROTOCOL_VERSION, type: "ping", payload: { at: now } }).then(
        (sent) => {
          if (!sent.ok) this.#log("debug", "ping not sent", { error: sent.error });
        },
        () => {},
      );
    }
  }
}

/**
 * The relay id of a command whose answer streams back as `relay_chunk`s (a relay, a download, a
 * snapshot export, a port's reply or socket).
 */
function relayIdOf(command: RunnerCommand): string | undefined {
  return command.kind === "relay" ||
    command.kind === "workspace_read" ||
    command.kind === "snapshot_read" ||
    command.kind === "port_request" ||
    command.kind === "port_socket"
    ? command.relay_id
    : undefined;
}
