/**
 * The runner's link to the server (proxy/PROTOCOL.md): dials OUT over WebSocket like a CI runner,
 * says hello with its authoritative session set on every (re)attach, answers pings, runs
 * commands, and reconnects with exponential backoff and full jitter. Messages produced while
 * the link is down (frames, state changes) are queued, bounded in messages and in bytes (the
 * oldest go first), and flushed after the hello. `backlog` (socket buffer + queue) is what the
 * runner's agents wait on: while it is high their output is not read (runner/sessions/agent-stdout.ts).
 *
 * `serve`'s embedded runner is given `dial` instead: the same link over an in-process channel
 * (contracts/runner-channel.ts), the same messages as the same text, validated the same way, the
 * same hello, welcome, backlog, close and redial; only the loopback socket is gone.
 */
import type { Socket } from "node:net";
import { CodedError } from "../../contracts/errors.ts";
import WebSocket from "ws";
import {
  type CommandResult,
  RUNNER_LINK_MAX_FRAME_BYTES,
  RUNNER_PROTOCOL_VERSION,
  type RunnerCommand,
  type RunnerSessionReport,
  RunnerToServer,
  ServerToRunner,
  UPLOAD_WINDOW_CAPABILITY,
} from "../../contracts/runner-protocol.ts";
import type { Logger } from "../../contracts/log.ts";
import {
  CLOSED_ABNORMALLY,
  type InProcessDial,
  type LinkChannel,
  type LinkMessage,
} from "../../contracts/runner-channel.ts";
import { BINARY_FRAMES_CAPABILITY, BinaryKind, decodeBinaryFrame } from "../../contracts/runner-binary.ts";
import { LinkWatchdog } from "./watchdog.ts";
import { RunnerCredential } from "./credential.ts";
import { RunningCommands } from "./running-commands.ts";

/**
 * A WebSocket client masks what it sends with a random key (RFC 6455 §5.3) so that a proxy between
 * it and the server that does not speak WebSocket cannot be made to read attacker-chosen bytes as
 * HTTP. Where no such proxy can stand (a loopback server; TLS, which no proxy reads without being
 * the endpoint) the key is all zeros: ws then neither copies nor XORs what the runner sends, and
 * the server does not XOR it back (measured, test/bench/snapshot-floor-bench.ts: 50 MB in 1 MiB
 * messages cost both ends 239 ms of CPU with a random key, 65 ms with the zero key, ws without its
 * native `bufferutil`). The frames are still masked frames (the bit set), as the server requires.
 */
export function noIntermediary(url: string): boolean {
  const { protocol, hostname } = new URL(url);
  if (protocol === "wss:") return true;
  const host = hostname.replace(/^\[|\]$/g, "");
  return host === "localhost" || host === "::1" || /^127\.\d+\.\d+\.\d+$/.test(host);
}

function zeroMask(mask: Uint8Array): void {
  mask.fill(0);
}

export type LinkOptions = {
  serverUrl: string;
  /** The runner token (registers this runner once) or this runner's own credential. */
  token: string;
  /**
   * Where the credential the server issues at registration is kept and read back (0600).
   * Without it, a runner registered with the runner token gets a new name binding never again.
   */
  credentialFile?: string | undefined;
  name: string;
  engine: "docker" | "kubernetes";
  capacity: number;
  labels: Record<string, string>;
  /** @default 250 */
  backoffBaseMs?: number;
  /** @default 10000 */
  backoffMaxMs?: number;
  /** @default 10000 queued messages while disconnected */
  maxQueue?: number;
  /** @default 8388608 bytes of queued messages while disconnected */
  maxQueueBytes?: number;
  /**
   * Dial the server in process (`serve`'s embedded runner) rather than over a WebSocket to
   * `serverUrl`. @default undefined (the WebSocket)
   */
  dial?: InProcessDial | undefined;
};

export type LinkHandlers = {
  sessions(): RunnerSessionReport[];
  /**
   * `signal` aborts past the command's deadline or on the server's `cancel` (running-commands.ts).
   * `bulk`: an upload piece's bytes that came in a binary frame (the command's `data_frame`).
   */
  command(command: RunnerCommand, signal: AbortSignal, bulk?: Buffer): Promise<Record<string, unknown>>;
  log: Logger;
};

type Outgoing = Exclude<RunnerToServer, { type: "hello" }>;

/** What the link needs of its transport once it is open: a WebSocket or an in-process channel. */
type Transport = {
  readonly open: boolean;
  readonly bufferedAmount: number;
  /** Sends one envelope (text) or binary frame (bytes, let go of once sent). */
  send(message: LinkMessage): void;
  close(code: number, reason: string): void;
  /**
   * Drops the connection without a closing handshake (a silent server would never answer one),
   * which ends in `close` and a redial. A WebSocket's only: an in-process channel cannot go silent
   * while this process runs.
   */
  terminate?(): void;
};

/** Full jitter backoff (AWS architecture blog): uniform in [0, min(max, base·2^attempt)]. */
export function backoffDelay(attempt: number, baseMs: number, maxMs: number, random = Math.random): number {
  return Math.floor(random() * Math.min(maxMs, baseMs * 2 ** attempt));
}

/** Upload pieces whose command has not come yet, at most (each at most WORKSPACE_CHUNK_BYTES). */
const MAX_WAITING_BULK = 16;

export class RunnerLink {
  readonly #o: Required<Omit<LinkOptions, "credentialFile" | "dial">>;
  readonly #dial: InProcessDial | undefined;
  readonly #h: LinkHandlers;
  readonly #credential: RunnerCredential;
  /** The current transport, open or opening; undefined between a close and the next dial. */
  #transport: Transport | undefined;
  #attached = false;
  #closed = false;
  #attempt = 0;
  /** Watches the server's pings while attached over a WebSocket (runner/link/watchdog.ts). */
  #watchdog: LinkWatchdog | undefined;
  /** Serialized messages waiting for the next attach, oldest first, and their total size. */
  #queue: string[] = [];
  #queuedBytes = 0;
  /** Messages the bounded queue let go since the last attach. */
  #dropped = 0;
  /** Commands under way, each under its deadline (running-commands.ts). */
  readonly #running = new RunningCommands();
  /** The server's welcome announced binary frames (PROTOCOL.md §9). */
  #peerBinary = false;
  /** Upload pieces' bytes that came in binary frames, by the command id that follows each. */
  readonly #bulk = new Map<string, Buffer>();
  runnerId: string | undefined;

  constructor(options: LinkOptions, handlers: LinkHandlers) {
    const { credentialFile, dial, ...rest } = options;
    this.#dial = dial;
    this.#o = {
      backoffBaseMs: 250,
      backoffMaxMs: 10_000,
      maxQueue: 10_000,
      maxQueueBytes: 8 * 1024 * 1024,
      ...rest,
    };
    this.#h = handlers;
    this.#credential = new RunnerCredential(options.token, credentialFile);
  }

  start(): void {
    this.#connect();
  }

  close(): void {
    this.#closed = true;
    this.#running.cancelAll();
    this.#watchdog?.stop();
    this.#transport?.close(1000, "runner shutting down");
  }

  /** Bytes on the link toward the server not yet taken by it (for backpressure). */
  get bufferedAmount(): number {
    return this.#transport?.bufferedAmount ?? 0;
  }

  /** Bytes on their way to the server: the socket's buffer plus what waits for the next attach. */
  get backlog(): number {
    return this.bufferedAmount + this.#queuedBytes;
  }

  get attached(): boolean {
    return this.#attached;
  }

  /** Whether bulk bytes go as binary frames now: attached, and the server takes them. */
  get binary(): boolean {
    return this.#attached && this.#peerBinary && this.#transport?.open === true;
  }

  /**
   * Sends one binary frame (contracts/runner-binary.ts) now; false when it cannot (detached, or a
   * server without binary frames): the caller's command fails with the link then anyway, so a
   * frame is never queued for the next attach.
   */
  sendBinary(frame: Buffer): boolean {
    if (!this.binary || !this.#transport) return false;
    this.#transport.send(frame);
    return true;
  }

  /** Sends now, or queues while detached. Validated before it leaves. */
  send(message: Outgoing): void {
    const text = JSON.stringify(RunnerToServer.parse(message));
    if (this.#attached && this.#transport?.open) {
      this.#transport.send(text);
      return;
    }
    this.#queue.push(text);
    this.#queuedBytes += Buffer.byteLength(text);
    // Bounded in messages and in bytes: the oldest go first.
    while (this.#queue.length > this.#o.maxQueue || this.#queuedBytes > this.#o.maxQueueBytes) {
      const oldest = this.#queue.shift();
      if (oldest === undefined) break;
      this.#queuedBytes -= Buffer.byteLength(oldest);
      this.#dropped++;
    }
  }

  #connect(): void {
    if (this.#dial) this.#connectInProcess(this.#dial);
    else this.#connectWebSocket();
  }

  #connectWebSocket(): void {
    const url = `${this.#o.serverUrl.replace(/^http/, "ws").replace(/\/$/, "")}/v1/runners/connect`;
    const ws = new WebSocket(url, {
      headers: { authorization: `Bearer ${this.#credential.bearer()}` },
      maxPayload: RUNNER_LINK_MAX_FRAME_BYTES,
      ...(noIntermediary(url) ? { generateMask: zeroMask } : {}),
    });
    let corked: Socket | undefined;
    const transport: Transport = {
      get open() {
        return ws.readyState === WebSocket.OPEN;
      },
      get bufferedAmount() {
        return ws.bufferedAmount;
      },
      /**
       * The messages of one tick (this callback and its promise reactions) leave in one write: a
       * relayed reply's last chunk and its command's result cost one syscall and one wake-up of
       * the server, not one each. Nothing waits: the socket is uncorked on the next tick.
       */
      send(message) {
        // ws keeps its socket private; without one (not connected) it is a plain send.
        const socket = (ws as unknown as { _socket?: Socket | null })._socket;
        if (socket && corked !== socket) {
          socket.cork();
          corked = socket;
          process.nextTick(() => {
            corked = undefined;
            socket.uncork();
          });
        }
        ws.send(message, { binary: typeof message !== "string" });
      },
      close: (code, reason) => ws.close(code, reason),
      terminate: () => ws.terminate(),
    };
    this.#transport = transport;
    ws.on("open", () => this.#opened(transport));
    ws.on("message", (data, isBinary) =>
      isBinary ? this.#onBinary(data as Buffer) : this.#onMessage(transport, String(data)),
    );
    ws.on("unexpected-response", (_req, res) => {
      this.#refused(res.statusCode ?? 0);
      // With this listener ws leaves the socket CONNECTING; end it so `close` redials.
      ws.terminate();
    });
    ws.on("error", (error) => this.#h.log("warn", "runner link error", { error: error.message }));
    ws.on("close", (code, reason) => this.#lost(code, reason.toString()));
  }

  /** `serve`'s embedded runner: the same link over an in-process channel to the hub. */
  #connectInProcess(dial: InProcessDial): void {
    // Until the dial answers, `close()` has nothing to close: it is checked once it does.
    this.#transport = undefined;
    dial(this.#credential.bearer()).then(
      (outcome) => {
        if (!outcome.ok) {
          this.#refused(outcome.status, outcome.error.message);
          this.#lost(CLOSED_ABNORMALLY, "");
          return;
        }
        const channel = outcome.channel;
        const transport = channelTransport(channel);
        this.#transport = transport;
        channel.onMessage((message) =>
          typeof message === "string" ? this.#onMessage(transport, message) : this.#onBinary(message),
        );
        channel.onClose((code, reason) => this.#lost(code, reason));
        if (this.#closed) channel.close(1000, "runner shutting down");
        else this.#opened(transport);
      },
      (error: unknown) => {
        this.#h.log("warn", "runner link error", { error: String(error) });
        this.#lost(CLOSED_ABNORMALLY, "");
      },
    );
  }

  /** Open: the hello, with this runner's authoritative session set (PROTOCOL.md §2). */
  #opened(transport: Transport): void {
    this.#attempt = 0;
    const hello: RunnerToServer = {
      version: RUNNER_PROTOCOL_VERSION,
      type: "hello",
      payload: {
        runner_name: this.#o.name,
        capacity: this.#o.capacity,
        labels: this.#o.labels,
        engine: this.#o.engine,
        sessions: this.#h.sessions(),
        capabilities: [BINARY_FRAMES_CAPABILITY, UPLOAD_WINDOW_CAPABILITY],
      },
    };
    transport.send(JSON.stringify(RunnerToServer.parse(hello)));
  }

  /** The server refused the link before it opened (the upgrade's HTTP status). */
  #refused(status: number, message?: string): void {
    const fallback = status === 401 && this.#credential.refused();
    this.#h.log("error", "server refused the runner link", {
      status,
      ...(message !== undefined ? { error: message } : {}),
      ...(fallback
        ? {
            next: "the server does not know this runner's saved credential: registering again with the runner token",
          }
        : {}),
    });
  }

  /** The link closed (or never opened): redial with backoff unless this runner is stopping. */
  #lost(code: number, reason: string): void {
    this.#watchdog?.stop();
    this.#watchdog = undefined;
    this.#attached = false;
    this.#peerBinary = false;
    this.#bulk.clear();
    this.#transport = undefined;
    if (this.#closed) return;
    // 4003: this runner's name is bound to another credential, or its credential was revoked.
    if (code === 4003)
      this.#h.log("error", "server refused this runner's identity", {
        name: this.#o.name,
        reason,
        hint: `an admin can issue this runner a credential: agent-sessions runners token create ${this.#o.name} (then AGENT_SESSIONS_RUNNER_TOKEN=<it>)`,
      });
    const delay = backoffDelay(this.#attempt++, this.#o.backoffBaseMs, this.#o.backoffMaxMs);
    this.#h.log("warn", "runner link lost; reconnecting", { delayMs: delay, attempt: this.#attempt });
    setTimeout(() => this.#connect(), delay);
  }

  #onMessage(transport: Transport, text: string): void {
    this.#watchdog?.heard();
    let message: ServerToRunner;
    try {
      message = ServerToRunner.parse(JSON.parse(text));
    } catch (error) {
      this.#h.log("error", "invalid message from server", { error: String(error).slice(0, 300) });
      return;
    }
    switch (message.type) {
      case "welcome": {
        // Registered with the runner token: keep the credential issued to this runner before
        // anything else, so the next connect presents it (PROTOCOL.md §2).
        if (message.payload.credential !== undefined) {
          const kept = this.#credential.issued(message.payload.credential);
          if (kept.ok)
            this.#h.log("info", "runner registered; its own credential is kept in its data dir", {
              name: this.#o.name,
            });
          else
            this.#h.log(
              "error",
              "runner registered, but its credential could not be kept: it lasts until this process ends",
              {
                name: this.#o.name,
                error: kept.error,
              },
            );
        }
        this.runnerId = message.payload.runner_id;
        this.#peerBinary = message.payload.capabilities?.includes(BINARY_FRAMES_CAPABILITY) === true;
        this.#attached = true;
        this.#watch(transport, message.payload.heartbeat_ms);
        const queued = this.#queue;
        const dropped = this.#dropped;
        this.#queue = [];
        this.#queuedBytes = 0;
        this.#dropped = 0;
        for (const m of queued) transport.send(m);
        this.#h.log("info", "runner attached", { runner_id: this.runnerId, flushed: queued.length, dropped });
        return;
      }
      case "cancel":
        this.#running.cancel(message.payload.command_id);
        return;
      case "ping":
        transport.send(
          JSON.stringify(
            RunnerToServer.parse({
              version: RUNNER_PROTOCOL_VERSION,
              type: "pong",
              payload: { at: message.payload.at },
            }),
          ),
        );
        return;
      case "command": {
        const { command_id, command, deadline_ms } = message.payload;
        const bulk = this.#bulk.get(command_id);
        this.#bulk.delete(command_id);
        this.#running
          .run(command_id, command, deadline_ms, async (c, signal) => {
            if ("data_frame" in c && c.data_frame && bulk === undefined)
              throw new CodedError(
                "INVALID_ARGUMENT",
                `the ${c.kind} piece's bytes did not come: no binary frame named command ${command_id} before it`,
              );
            return this.#h.command(c, signal, bulk);
          })
          .then(
            (result) => this.#result({ command_id, ok: true, result }),
            (error: unknown) => {
              const e = error as { code?: string; message?: string };
              const code = typeof e.code === "string" && /^[A-Z_]+$/.test(e.code) ? e.code : "INTERNAL";
              this.#result({
                command_id,
                ok: false,
                error: { code: code as never, message: String(e.message ?? error).slice(0, 500) },
              });
            },
          );
        return;
      }
      default: {
        const never: never = message;
        throw new Error(`unhandled ${JSON.stringify(never)}`);
      }
    }
  }

  /**
   * PROTOCOL.md §9: an upload piece's bytes, held for the command that follows it. A frame that
   * does not parse, of another kind, or from a server that did not announce them, is dropped and
   * logged, as an invalid envelope is.
   */
  #onBinary(bytes: Uint8Array): void {
    this.#watchdog?.heard();
    const parsed = this.#peerBinary
      ? decodeBinaryFrame(bytes)
      : { ok: false as const, reason: "binary frame from a server that did not announce them" };
    if (!parsed.ok || parsed.frame.kind !== BinaryKind.commandData) {
      this.#h.log("error", "invalid message from server", {
        error: parsed.ok ? "binary frame: a relay chunk from the server" : parsed.reason,
      });
      return;
    }
    // Its command comes next on the same link; a few at most wait (one per upload in flight).
    if (this.#bulk.size >= MAX_WAITING_BULK) {
      const oldest = this.#bulk.keys().next().value as string;
      this.#bulk.delete(oldest);
      this.#h.log("error", "invalid message from server", {
        error: "binary frames without their commands; the oldest dropped",
      });
    }
    this.#bulk.set(parsed.frame.id, parsed.frame.data);
  }

  /** PROTOCOL.md §4: a server silent for 3 of its heartbeat intervals is dropped, and redialled. */
  #watch(transport: Transport, heartbeatMs: number): void {
    this.#watchdog?.stop();
    this.#watchdog = undefined;
    const terminate = transport.terminate;
    if (!terminate) return;
    this.#watchdog = new LinkWatchdog(heartbeatMs, (silentMs) => {
      this.#h.log("warn", "the server sent nothing for 3 heartbeats; dropping the link to redial", {
        silent_ms: silentMs,
        heartbeat_ms: heartbeatMs,
      });
      terminate();
    });
  }

  #result(result: CommandResult): void {
    this.send({ version: RUNNER_PROTOCOL_VERSION, type: "result", payload: result });
  }
}

function channelTransport(channel: LinkChannel): Transport {
  return {
    get open() {
      return channel.open;
    },
    get bufferedAmount() {
      return channel.bufferedAmount;
    },
    send: (message) => channel.send(message),
    close: (code, reason) => channel.close(code, reason),
  };
}
