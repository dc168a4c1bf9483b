/**
 * The runner's link to the server (proxy/PROTOCOL.md): dials OUT over WebSocket like a CI runner,
 * says hello with its authoritative session set on every (re)attach, answers pings, runs
 * commands, and reconnects with exponential backoff and full jitter. Messages produced while
 * the link is down (frames, state changes) are queued, bounded in messages and in bytes (the
 * oldest go first), and flushed after the hello. `backlog` (socket buffer + queue) is what the
 * runner's agents wait on: while it is high their output is not read (runner/agent-stdout.ts).
 */
import type { Socket } from "node:net";
import WebSocket from "ws";
import {
  type CommandResult,
  RUNNER_LINK_MAX_FRAME_BYTES,
  RUNNER_PROTOCOL_VERSION,
  type RunnerCommand,
  type RunnerSessionReport,
  RunnerToServer,
  ServerToRunner,
} from "../contracts/runner-protocol.ts";
import type { Logger } from "../contracts/log.ts";
import { RunnerCredential } from "./runner-credential.ts";

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
};

export type LinkHandlers = {
  sessions(): RunnerSessionReport[];
  command(command: RunnerCommand): Promise<Record<string, unknown>>;
  log: Logger;
};

type Outgoing = Exclude<RunnerToServer, { type: "hello" }>;

/** Full jitter backoff (AWS architecture blog): uniform in [0, min(max, base·2^attempt)]. */
export function backoffDelay(attempt: number, baseMs: number, maxMs: number, random = Math.random): number {
  return Math.floor(random() * Math.min(maxMs, baseMs * 2 ** attempt));
}

export class RunnerLink {
  readonly #o: Required<Omit<LinkOptions, "credentialFile">>;
  readonly #h: LinkHandlers;
  readonly #credential: RunnerCredential;
  #ws: WebSocket | undefined;
  #attached = false;
  #closed = false;
  #attempt = 0;
  /** Serialized messages waiting for the next attach, oldest first, and their total size. */
  #queue: string[] = [];
  #queuedBytes = 0;
  /** Messages the bounded queue let go since the last attach. */
  #dropped = 0;
  runnerId: string | undefined;
  /** The socket held corked until the end of this tick (see `#write`). */
  #corked: Socket | undefined;

  constructor(options: LinkOptions, handlers: LinkHandlers) {
    const { credentialFile, ...rest } = options;
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
    this.#ws?.close(1000, "runner shutting down");
  }

  /** Bytes queued on the socket toward the server (for backpressure). */
  get bufferedAmount(): number {
    return this.#ws?.bufferedAmount ?? 0;
  }

  /** Bytes on their way to the server: the socket's buffer plus what waits for the next attach. */
  get backlog(): number {
    return this.bufferedAmount + this.#queuedBytes;
  }

  get attached(): boolean {
    return this.#attached;
  }

  /** Sends now, or queues while detached. Validated before it leaves. */
  send(message: Outgoing): void {
    const text = JSON.stringify(RunnerToServer.parse(message));
    if (this.#attached && this.#ws?.readyState === WebSocket.OPEN) {
      this.#write(this.#ws, text);
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

  /**
   * Sends one message; the messages of one tick (this callback and its promise reactions) leave
   * in one write: a relayed reply's last chunk and its command's result cost one syscall and one
   * wake-up of the server, not one each. Nothing waits: the socket is uncorked on the next tick.
   */
  #write(ws: WebSocket, text: string): void {
    // ws keeps its socket private; without one (not connected) it is a plain send.
    const socket = (ws as unknown as { _socket?: Socket | null })._socket;
    if (socket && this.#corked !== socket) {
      socket.cork();
      this.#corked = socket;
      process.nextTick(() => {
        this.#corked = undefined;
        socket.uncork();
      });
    }
    ws.send(text);
  }

  #connect(): void {
    const url = `${this.#o.serverUrl.replace(/^http/, "ws").replace(/\/$/, "")}/v1/runners/connect`;
    const ws = new WebSocket(url, {
      headers: { authorization: `Bearer ${this.#credential.bearer()}` },
      maxPayload: RUNNER_LINK_MAX_FRAME_BYTES,
    });
    this.#ws = ws;
    ws.on("open", () => {
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
        },
      };
      ws.send(JSON.stringify(RunnerToServer.parse(hello)));
    });
    ws.on("message", (data) => this.#onMessage(ws, String(data)));
    ws.on("unexpected-response", (_req, res) => {
      const fallback = res.statusCode === 401 && this.#credential.refused();
      this.#h.log("error", "server refused the runner link", {
        status: res.statusCode,
        ...(fallback
          ? {
              next: "the server does not know this runner's saved credential: registering again with the runner token",
            }
          : {}),
      });
      // With this listener ws leaves the socket CONNECTING; end it so `close` redials.
      ws.terminate();
    });
    ws.on("error", (error) => this.#h.log("warn", "runner link error", { error: error.message }));
    ws.on("close", (code, reason) => {
      this.#attached = false;
      if (this.#closed) return;
      // 4003: this runner's name is bound to another credential, or its credential was revoked.
      if (code === 4003)
        this.#h.log("error", "server refused this runner's identity", {
          name: this.#o.name,
          reason: reason.toString(),
          hint: `an admin can issue this runner a credential: agent-sessions runners token create ${this.#o.name} (then AGENT_SESSIONS_RUNNER_TOKEN=<it>)`,
        });
      const delay = backoffDelay(this.#attempt++, this.#o.backoffBaseMs, this.#o.backoffMaxMs);
      this.#h.log("warn", "runner link lost; reconnecting", { delayMs: delay, attempt: this.#attempt });
      setTimeout(() => this.#connect(), delay);
    });
  }

  #onMessage(ws: WebSocket, text: string): void {
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
        this.#attached = true;
        const queued = this.#queue;
        const dropped = this.#dropped;
        this.#queue = [];
        this.#queuedBytes = 0;
        this.#dropped = 0;
        for (const m of queued) this.#write(ws, m);
        this.#h.log("info", "runner attached", { runner_id: this.runnerId, flushed: queued.length, dropped });
        return;
      }
      case "ping":
        ws.send(
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
        const { command_id, command } = message.payload;
        this.#h.command(command).then(
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

  #result(result: CommandResult): void {
    this.send({ version: RUNNER_PROTOCOL_VERSION, type: "result", payload: result });
  }
}
