/**
 * An ACP agent (Agent Client Protocol, agentclientprotocol.com) as a child process: JSON-RPC 2.0,
 * one message a line on its stdin/stdout. We are the client: our requests (`initialize`,
 * `session/new`, `session/load`, `session/prompt`, …) are answered by id; its notifications
 * (`session/update`) go to the subscribers; its requests to us (`session/request_permission`,
 * `fs/*`, …) are answered by `onRequest`, or refused as not supported. The process and its lines
 * are the kit's (runtimes/kit/json-lines-child.ts).
 */
import { type AgentProcess, JsonLinesChild } from "../kit/json-lines-child.ts";

export type AcpError = { code: number; message: string; data?: unknown };
export type AcpResponse = { ok: true; result: unknown } | { ok: false; error: AcpError };
export type AcpNotification = { method: string; params: Record<string, unknown> };

export type AcpProcessOptions = {
  /** argv: the executable, then its arguments. */
  command: string[];
  cwd: string;
  env: NodeJS.ProcessEnv;
  /** Answers the agent's requests to us; undefined = not supported (JSON-RPC -32601). */
  onRequest?: (method: string, params: Record<string, unknown>) => unknown;
  /** Where the agent's stderr goes. @default our stderr */
  stderr?: (chunk: Buffer) => void;
};

type Message = {
  jsonrpc?: string;
  id?: number | string | null;
  method?: string;
  params?: Record<string, unknown>;
  result?: unknown;
  error?: AcpError;
};

export class AcpClient implements AgentProcess {
  readonly #child: JsonLinesChild;
  readonly #pending = new Map<number, (response: AcpResponse) => void>();
  readonly #listeners = new Set<(notification: AcpNotification) => void>();
  readonly #onRequest: AcpProcessOptions["onRequest"];
  #nextId = 0;
  /** Resolves with the exit code (null when killed by a signal) once the agent has exited. */
  readonly exited: Promise<number | null>;

  constructor(options: AcpProcessOptions) {
    this.#onRequest = options.onRequest;
    this.#child = new JsonLinesChild({
      command: options.command,
      cwd: options.cwd,
      env: options.env,
      ...(options.stderr ? { stderr: options.stderr } : {}),
      label: "the ACP agent",
      onRecord: (message) => this.#receive(message as Message),
      onExit: () => {
        for (const answer of this.#pending.values())
          answer({ ok: false, error: { code: -32000, message: "the agent exited" } });
        this.#pending.clear();
      },
    });
    this.exited = this.#child.exited;
  }

  get running(): boolean {
    return this.#child.running;
  }

  #write(message: Message): void {
    this.#child.send({ jsonrpc: "2.0", ...message });
  }

  #receive(message: Message): void {
    if (typeof message !== "object" || message === null) return;
    if (message.method === undefined) {
      // A response to one of ours.
      const answer = typeof message.id === "number" ? this.#pending.get(message.id) : undefined;
      if (!answer || typeof message.id !== "number") return;
      this.#pending.delete(message.id);
      answer(
        message.error
          ? { ok: false, error: message.error }
          : { ok: true, result: message.result === undefined ? null : message.result },
      );
      return;
    }
    const params = message.params && typeof message.params === "object" ? message.params : {};
    if (message.id === undefined || message.id === null) {
      for (const listener of this.#listeners) listener({ method: message.method, params });
      return;
    }
    const result = this.#onRequest?.(message.method, params);
    if (result === undefined)
      this.#write({ id: message.id, error: { code: -32601, message: `${message.method} is not supported` } });
    else this.#write({ id: message.id, result });
  }

  /** Every notification from now on; returns the unsubscribe function. */
  subscribe(listener: (notification: AcpNotification) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /** Sends one request and resolves with the agent's response (an error once it exited). */
  request(method: string, params: Record<string, unknown> = {}): Promise<AcpResponse> {
    if (!this.running)
      return Promise.resolve({ ok: false, error: { code: -32000, message: "the agent is not running" } });
    const id = ++this.#nextId;
    return new Promise((resolve) => {
      this.#pending.set(id, resolve);
      this.#write({ id, method, params });
    });
  }

  /** Sends one notification (no answer), e.g. `session/cancel`. */
  notify(method: string, params: Record<string, unknown> = {}): void {
    this.#write({ method, params });
  }

  /** Orderly shutdown: closing stdin ends the agent's stdio server. */
  stop(graceMs = 5_000): Promise<void> {
    return this.#child.stop(graceMs);
  }
}
