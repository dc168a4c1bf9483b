import WebSocket from "ws";
import type { AgentFrame, SessionState } from "../../contracts/compass.ts";
import type { ApiErrorBody } from "../../contracts/errors.ts";
import {
  RUNNER_PROTOCOL_VERSION,
  type RunnerCommand,
  type RunnerSessionReport,
  RunnerToServer,
  ServerToRunner,
} from "../../contracts/runner-protocol.ts";

export type Reply =
  | { ok: true; result: Record<string, unknown> }
  | { ok: false; error: ApiErrorBody }
  | "no-reply";
export type CommandHandler = (command: RunnerCommand) => Reply | Promise<Reply>;

export type FakeRunnerOptions = {
  name?: string;
  engine?: "docker" | "kubernetes";
  capacity?: number;
  labels?: Record<string, string>;
  sessions?: RunnerSessionReport[];
  /** Answer pings (turn off to test missed heartbeats). @default true */
  answerPings?: boolean;
  handler?: CommandHandler;
  /** Announced in its hello (PROTOCOL.md §9: `binary_frames`). @default none (an older runner) */
  capabilities?: string[];
};

/** A provision answered as done: the workload at `endpoint`, running the image by `digest`. */
export function provisioned(
  command: Extract<RunnerCommand, { kind: "provision" }>,
  digest: string,
  endpoint = "10.0.0.9:8080",
): Reply {
  return {
    ok: true,
    result: { container_name: command.container_name, endpoint, resolved_image_digest: digest },
  };
}

/** What a cooperative runner answers when the test does not say otherwise. */
export const defaultHandler: CommandHandler = (command) => {
  switch (command.kind) {
    case "provision":
      return { ok: true, result: { container_name: command.container_name, endpoint: "10.213.0.9:8080" } };
    case "start":
      return { ok: true, result: { state: "READY" } };
    case "stop":
      return { ok: true, result: { state: "STOPPED" } };
    case "remove":
      return { ok: true, result: { container_name: command.container_name, removed: true } };
    default:
      return { ok: true, result: {} };
  }
};

/**
 * An in-process runner over a real WebSocket, for unit tests of the server: records the
 * commands it receives and answers them with `handler`. Validates everything it sends and gets.
 */
export class FakeRunner {
  readonly ws: WebSocket;
  readonly commands: RunnerCommand[] = [];
  readonly received: ServerToRunner[] = [];
  /** Binary frames the server sent it, in order, and how many envelopes had come before each. */
  readonly binary: { bytes: Buffer; after: number }[] = [];
  runnerId = "";
  /** The credential the server issued in `welcome` (a runner that registered with the runner token). */
  issuedCredential: string | undefined;
  handler: CommandHandler;
  answerPings: boolean;
  #waiters: (() => void)[] = [];

  private constructor(ws: WebSocket, options: FakeRunnerOptions) {
    this.ws = ws;
    this.handler = options.handler ?? defaultHandler;
    this.answerPings = options.answerPings ?? true;
  }

  /** Dial, say hello, resolve on welcome; rejects when refused (HTTP) or closed before a welcome. */
  static connect(url: string, token: string, options: FakeRunnerOptions = {}): Promise<FakeRunner> {
    const ws = new WebSocket(url, { headers: { authorization: `Bearer ${token}` } });
    const runner = new FakeRunner(ws, options);
    return new Promise((resolve, reject) => {
      ws.on("unexpected-response", (_req, res) => {
        reject(new Error(`refused with HTTP ${res.statusCode}`));
        ws.terminate();
      });
      ws.on("error", reject);
      ws.on("close", (code) => reject(new Error(`closed with ${code} before a welcome`)));
      ws.on("open", () =>
        runner.send({
          version: RUNNER_PROTOCOL_VERSION,
          type: "hello",
          payload: {
            runner_name: options.name ?? "fake",
            capacity: options.capacity ?? 10,
            labels: options.labels ?? {},
            engine: options.engine ?? "docker",
            sessions: options.sessions ?? [],
            ...(options.capabilities ? { capabilities: options.capabilities } : {}),
          },
        }),
      );
      ws.on("message", (data, isBinary) => {
        if (isBinary) {
          runner.binary.push({ bytes: data as Buffer, after: runner.received.length });
          return;
        }
        const message = ServerToRunner.parse(JSON.parse(String(data)));
        runner.received.push(message);
        runner.#onMessage(message);
        if (message.type === "welcome") {
          runner.runnerId = message.payload.runner_id;
          runner.issuedCredential = message.payload.credential;
          resolve(runner);
        }
        for (const wake of runner.#waiters.splice(0)) wake();
      });
    });
  }

  send(message: RunnerToServer): void {
    this.ws.send(JSON.stringify(RunnerToServer.parse(message)));
  }

  frame(sessionId: string, frame: Omit<AgentFrame, "protocol">): void {
    this.send({
      version: RUNNER_PROTOCOL_VERSION,
      type: "frame",
      payload: { session_id: sessionId, frame: { protocol: "compass.v1", ...frame } },
    });
  }

  state(sessionId: string, state: SessionState, reason?: string): void {
    this.send({
      version: RUNNER_PROTOCOL_VERSION,
      type: "session_state",
      payload:
        reason === undefined ? { session_id: sessionId, state } : { session_id: sessionId, state, reason },
    });
  }

  commandsOf<K extends RunnerCommand["kind"]>(kind: K): Extract<RunnerCommand, { kind: K }>[] {
    return this.commands.filter((c): c is Extract<RunnerCommand, { kind: K }> => c.kind === kind);
  }

  /** Resolves when `predicate` holds after some message (or at once). */
  async until(predicate: () => boolean, timeoutMs = 5_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (!predicate()) {
      if (Date.now() > deadline) throw new Error("FakeRunner.until: timed out");
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, 20);
        this.#waiters.push(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
  }

  /** Resolves when the server closed the link; the close code. */
  closed(): Promise<number> {
    if (this.ws.readyState === WebSocket.CLOSED) return Promise.resolve(-1);
    return new Promise((resolve) => this.ws.once("close", (code) => resolve(code)));
  }

  /** Drop the link without a close handshake (a SIGKILLed runner). */
  kill(): void {
    this.ws.terminate();
  }

  #onMessage(message: ServerToRunner): void {
    if (message.type === "ping" && this.answerPings)
      this.send({ version: RUNNER_PROTOCOL_VERSION, type: "pong", payload: { at: message.payload.at } });
    if (message.type !== "command") return;
    const { command_id, command } = message.payload;
    this.commands.push(command);
    Promise.resolve(this.handler(command)).then(
      (reply) => {
        if (reply === "no-reply" || this.ws.readyState !== WebSocket.OPEN) return;
        this.send({
          version: RUNNER_PROTOCOL_VERSION,
          type: "result",
          payload: reply.ok
            ? { command_id, ok: true, result: reply.result }
            : { command_id, ok: false, error: reply.error },
        });
      },
      () => {},
    );
  }
}
