import { randomUUID } from "node:crypto";
import { BinaryKind, encodeBinaryFrame } from "../../contracts/runner-binary.ts";
import { describeZodError, type ApiErrorBody } from "../../contracts/errors.ts";
import {
  type CommandResult,
  RUNNER_PROTOCOL_VERSION,
  type RunnerCommand,
  ServerToRunner,
} from "../../contracts/runner-protocol.ts";
import type { RunnerIdentity } from "./runner-identity.ts";
import type { RunnerSocket } from "./runner-socket.ts";
import type { RunnerRecord } from "../store/store.ts";

/** A command's outcome as a value: nothing crosses the link as a throw. */
import type { Outcome } from "../lifecycle/runner-directory.ts";

export type { Outcome };

type Pending = {
  kind: RunnerCommand["kind"];
  resolve: (outcome: Outcome<Record<string, unknown>>) => void;
  timer: NodeJS.Timeout;
};

/** One runner's link (its WebSocket, or the embedded runner's channel): validated sends, and the commands awaiting its replies. */
export class RunnerConnection {
  readonly socket: RunnerSocket;
  /** What it authenticated with; a credential once its `hello` was admitted (runner-identity.ts). */
  identity: RunnerIdentity;
  /** Set by a valid `hello`. */
  runner: RunnerRecord | undefined;
  helloSeen = false;
  /** Attached and reconciled: commands may be sent. */
  available = false;
  /** Its sessions were marked DISCONNECTED and its commands failed (once). */
  detached = false;
  /**
   * Its `hello` announced binary frames (contracts/runner-binary.ts): bulk bytes go to it raw and
   * may come from it raw. Otherwise (an older runner) they go as base64 in the envelopes.
   */
  binary = false;
  /**
   * Its `hello` announced UPLOAD_WINDOW_CAPABILITY (contracts/runner-protocol.ts): pieces of one
   * upload may go to it before the previous ones are answered.
   */
  uploadWindow = false;
  lastSeenAt: number;
  readonly #pending = new Map<string, Pending>();

  constructor(socket: RunnerSocket, now: number, identity: RunnerIdentity) {
    this.socket = socket;
    this.identity = identity;
    this.lastSeenAt = now;
  }

  /** Validate and send one envelope; resolves once handed to the link, never rejects. */
  send(message: ServerToRunner): Promise<Outcome<undefined>> {
    const parsed = ServerToRunner.safeParse(message);
    if (!parsed.success)
      return Promise.resolve({
        ok: false,
        error: {
          code: "INTERNAL",
          message: `refusing to send an invalid ${message.type}: ${describeZodError(parsed.error)}`,
        },
      });
    if (!this.socket.open)
      return Promise.resolve({
        ok: false,
        error: { code: "UNAVAILABLE", message: "runner link is not open" },
      });
    return new Promise((resolve) => {
      this.socket.send(JSON.stringify(parsed.data), (error) => {
        resolve(
          error
            ? {
                ok: false,
                error: { code: "UNAVAILABLE", message: `sending to the runner failed: ${error.message}` },
              }
            : { ok: true, result: undefined },
        );
      });
    });
  }

  /**
   * Send a command and wait for its `result`, the deadline, or the link's loss. `bulk`: an
   * upload piece's bytes (`workspace_write`, `snapshot_write`, whose `data` is then empty): a
   * binary frame before the command when the runner takes them, else base64 in `data`.
   */
  async request(
    command: RunnerCommand,
    timeoutMs: number,
    bulk?: Uint8Array,
  ): Promise<Outcome<Record<string, unknown>>> {
    const commandId = randomUUID();
    const reply = new Promise<Outcome<Record<string, unknown>>>((resolve) => {
      const timer = setTimeout(() => {
        this.#pending.delete(commandId);
        // Nobody waits for it any more: the runner stops its work (PROTOCOL.md §7). Its own
        // deadline (`deadline_ms`) stops it too when this does not arrive (a lost link).
        void this.send({
          version: RUNNER_PROTOCOL_VERSION,
          type: "cancel",
          payload: { command_id: commandId },
        });
        resolve({
          ok: false,
          error: {
            code: "DEADLINE_EXCEEDED",
            message: `the runner did not answer the ${command.kind} command within ${timeoutMs} ms`,
          },
        });
      }, timeoutMs);
      this.#pending.set(commandId, { kind: command.kind, resolve, timer });
    });
    let carried = command;
    if (bulk !== undefined && (command.kind === "workspace_write" || command.kind === "snapshot_write")) {
      if (this.binary && this.socket.open) {
        // Ahead of its command, in order on every transport: the runner holds it for that command.
        this.socket.send(encodeBinaryFrame(BinaryKind.commandData, commandId, bulk), () => {});
        carried = { ...command, data: "", data_frame: true };
      } else carried = { ...command, data: Buffer.from(bulk).toString("base64") };
    }
    const sent = await this.send({
      version: RUNNER_PROTOCOL_VERSION,
      type: "command",
      payload: { command_id: commandId, command: carried, deadline_ms: timeoutMs },
    });
    if (!sent.ok) this.#settle(commandId, sent);
    return reply;
  }

  /** A `result` from the runner; false when no command waits for it (late or unknown). */
  settle(result: CommandResult): boolean {
    return this.#settle(result.command_id, result.ok ? { ok: true, result: result.result } : result);
  }

  /** Fail one waiting command (e.g. its result did not validate). */
  fail(commandId: string, error: ApiErrorBody): boolean {
    return this.#settle(commandId, { ok: false, error });
  }

  /** Fail every waiting command (the link is gone). */
  failAll(error: ApiErrorBody): void {
    for (const id of [...this.#pending.keys()]) this.#settle(id, { ok: false, error });
  }

  get pendingCount(): number {
    return this.#pending.size;
  }

  close(code: number, reason: string): void {
    if (this.socket.closable) this.socket.close(code, reason);
  }

  #settle(commandId: string, outcome: Outcome<Record<string, unknown>>): boolean {
    const pending = this.#pending.get(commandId);
    if (!pending) return false;
    this.#pending.delete(commandId);
    clearTimeout(pending.timer);
    pending.resolve(outcome);
    return true;
  }
}
