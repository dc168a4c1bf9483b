/**
 * An ACP agent (Agent Client Protocol, agentclientprotocol.com) as a child process: JSON-RPC 2.0,
 * one message a line on its stdin/stdout. We are the client: our requests (`initialize`,
 * `session/new`, `session/load`, `session/prompt`, …) are answered by id; its notifications
 * (`session/update`) go to the subscribers; its requests to us (`session/request_permission`,
 * `fs/*`, …) are answered by `onRequest`, or refused as not supported. Lines are split on LF only
 * (JSON strings may hold U+2028/U+2029). Stdout is protocol only; the agent's logs go to stderr.
 */
import { type ChildProcess, spawn } from "node:child_process";

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

export class AcpClient {
  readonly #child: ChildProcess;
  readonly #pending = new Map<number, (response: AcpResponse) => void>();
  readonly #listeners = new Set<(notification: AcpNotification) => void>();
  readonly #onRequest: AcpProcessOptions["onRequest"];
  #nextId = 0;
  #exitCode: number | null | undefined;
  /** Resolves with the exit code (null when killed by a signal) once the agent has exited. */
  readonly exited: Promise<number | null>;

  constructor(options: AcpProcessOptions) {
    const [file, ...args] = options.command;
    if (!file) throw new Error("acp: empty command");
    this.#onRequest = options.onRequest;
    this.#child = spawn(file, args, { cwd: options.cwd, env: options.env, stdio: ["pipe", "pipe", "pipe"] });
    this.exited = new Promise((resolve) => {
      const done = (code: number | null) => {
        if (this.#exitCode !== undefined) return;
        this.#exitCode = code;
        for (const answer of this.#pending.values())
          answer({ ok: false, error: { code: -32000, message: "the agent exited" } });
        this.#pending.clear();
        resolve(code);
      };
      this.#child.once("exit", (code) => done(code));
      this.#child.once("error", () => done(null));
    });
    const stderr = options.stderr ?? ((chunk: Buffer) => process.stderr.write(chunk));
    this.#child.stderr?.on("data", stderr);
    let buffer = "";
    const decoder = new TextDecoder();
    this.#child.stdout?.on("data", (chunk: Buffer) => {
      buffer += decoder.decode(chunk, { stream: true });
      for (let i = buffer.indexOf("\n"); i >= 0; i = buffer.indexOf("\n")) {
        const line = buffer.slice(0, i).replace(/\r$/, "");
        buffer = buffer.slice(i + 1);
        if (line.trim()) this.#receive(line);
      }
    });
    // A closed pipe after the agent exited is reported through `exited`, not as a crash of ours.
    this.#child.stdin?.on("error", () => undefined);
  }

  get running(): boolean {
    return this.#exitCode === undefined;
  }

  #write(message: Message): void {
    if (this.running) this.#child.stdin?.write(`${JSON.stringify({ jsonrpc: "2.0", ...message })}\n`);
  }

  #receive(line: string): void {
    let message: Message;
    try {
      message = JSON.parse(line) as Message;
    } catch {
      process.stderr.write(`the ACP agent wrote a line that is not JSON (${line.length} bytes); ignored\n`);
      return;
    }
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

  /** Orderly shutdown: closing stdin ends the agent's stdio server; SIGTERM after `graceMs`, SIGKILL after twice that. */
  async stop(graceMs = 5_000): Promise<void> {
    if (!this.running) return;
    this.#child.stdin?.end();
    const term = setTimeout(() => this.#child.kill("SIGTERM"), graceMs);
    const kill = setTimeout(() => this.#child.kill("SIGKILL"), graceMs * 2);
    await this.exited;
    clearTimeout(term);
    clearTimeout(kill);
  }
}
