/**
 * The Pi coding agent in `--mode rpc` as a child process (pi's docs/rpc.md): commands are JSON
 * lines on its stdin, each answered by a `response` record with the same `id`; session events
 * (message deltas, tool executions, `agent_settled`, …) stream on its stdout. Records are split on
 * LF only: JSON strings may hold U+2028/U+2029, which Node's readline would split on. Stdout is
 * protocol only; pi's diagnostics go to stderr, passed through to ours.
 */
import { type ChildProcess, spawn } from "node:child_process";

/** One record pi wrote on stdout. Events are read by `type`; fields vary by event. */
export type PiRecord = { type: string; id?: string; [field: string]: unknown };
export type PiResponse = { success: boolean; data?: unknown; error?: string };

export type PiProcessOptions = {
  /** argv: the executable, then its arguments. */
  command: string[];
  cwd: string;
  env: NodeJS.ProcessEnv;
  /** Where pi's stderr goes. @default our stderr */
  stderr?: (chunk: Buffer) => void;
};

export class PiRpcClient {
  readonly #child: ChildProcess;
  readonly #pending = new Map<string, (response: PiResponse) => void>();
  readonly #listeners = new Set<(record: PiRecord) => void>();
  #nextId = 0;
  #exitCode: number | null | undefined;
  /** Resolves with the exit code (null when killed by a signal) once pi has exited. */
  readonly exited: Promise<number | null>;

  constructor(options: PiProcessOptions) {
    const [file, ...args] = options.command;
    if (!file) throw new Error("pi: empty command");
    this.#child = spawn(file, args, { cwd: options.cwd, env: options.env, stdio: ["pipe", "pipe", "pipe"] });
    this.exited = new Promise((resolve) => {
      this.#child.once("exit", (code) => {
        this.#exitCode = code;
        for (const answer of this.#pending.values()) answer({ success: false, error: "pi exited" });
        this.#pending.clear();
        resolve(code);
      });
      this.#child.once("error", () => resolve(null));
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
    // A closed pipe after pi exited is reported through `exited`, not as a crash of ours.
    this.#child.stdin?.on("error", () => undefined);
  }

  get running(): boolean {
    return this.#exitCode === undefined;
  }

  #receive(line: string): void {
    let record: PiRecord;
    try {
      record = JSON.parse(line) as PiRecord;
    } catch {
      process.stderr.write(`pi wrote a line that is not JSON (${line.length} bytes); ignored\n`);
      return;
    }
    if (record.type === "response" && typeof record.id === "string") {
      const answer = this.#pending.get(record.id);
      if (answer) {
        this.#pending.delete(record.id);
        answer(record as unknown as PiResponse);
        return;
      }
    }
    for (const listener of this.#listeners) listener(record);
  }

  /** Every event record from now on; returns the unsubscribe function. */
  subscribe(listener: (record: PiRecord) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /** Sends one command and resolves with pi's response to it (`success: false` once pi exited). */
  command(type: string, fields: Record<string, unknown> = {}): Promise<PiResponse> {
    if (!this.running) return Promise.resolve({ success: false, error: "pi is not running" });
    const id = `c${++this.#nextId}`;
    return new Promise((resolve) => {
      this.#pending.set(id, resolve);
      this.#child.stdin?.write(`${JSON.stringify({ ...fields, id, type })}\n`);
    });
  }

  /**
   * Orderly shutdown: closing stdin asks pi to finish and exit (docs/rpc.md "Shutdown"); SIGTERM
   * after `graceMs`, SIGKILL after twice that.
   */
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
