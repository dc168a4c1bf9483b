/**
 * The Pi coding agent in `--mode rpc` as a child process (pi's pi's docs/rpc.md): commands are JSON
 * lines on its stdin, each answered by a `response` record with the same `id`; session events
 * (message deltas, tool executions, `agent_settled`, …) stream on its stdout. The process and its
 * lines are the kit's (runtimes/kit/json-lines-child.ts).
 */
import { type AgentProcess, JsonLinesChild } from "../kit/json-lines-child.ts";

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

export class PiRpcClient implements AgentProcess {
  readonly #child: JsonLinesChild;
  readonly #pending = new Map<string, (response: PiResponse) => void>();
  readonly #listeners = new Set<(record: PiRecord) => void>();
  #nextId = 0;
  /** Resolves with the exit code (null when killed by a signal) once pi has exited. */
  readonly exited: Promise<number | null>;

  constructor(options: PiProcessOptions) {
    this.#child = new JsonLinesChild({
      ...options,
      label: "pi",
      onRecord: (record) => this.#receive(record as PiRecord),
      onExit: () => {
        for (const answer of this.#pending.values()) answer({ success: false, error: "pi exited" });
        this.#pending.clear();
      },
    });
    this.exited = this.#child.exited;
  }

  get running(): boolean {
    return this.#child.running;
  }

  #receive(record: PiRecord): void {
    if (typeof record !== "object" || record === null) return;
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
      this.#child.send({ ...fields, id, type });
    });
  }

  /** Orderly shutdown: closing stdin asks pi to finish and exit (pi's docs/rpc.md "Shutdown"). */
  stop(graceMs = 5_000): Promise<void> {
    return this.#child.stop(graceMs);
  }
}
