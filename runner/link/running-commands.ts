/**
 * The commands a runner is working on, each with the deadline the runner enforces (issue 34 item
 * 13; PROTOCOL.md §7): past the `deadline_ms` the server gave it, or when the server sends
 * `cancel`, the command's signal aborts (work that honours it stops: a diff's container is
 * removed, a listing's tar stream is destroyed, a relay is cancelled at the adapter) and its
 * result is DEADLINE_EXCEEDED or CANCELLED at once, whether or not the work has stopped yet.
 */
import { CodedError } from "../../contracts/errors.ts";
import { RUNNER_COMMAND_DEADLINE_MS, type RunnerCommand } from "../../contracts/runner-protocol.ts";

export type CommandWork = (command: RunnerCommand, signal: AbortSignal) => Promise<Record<string, unknown>>;

export class RunningCommands {
  readonly #running = new Map<string, AbortController>();

  /** Runs `work` under the command's deadline; settles with its result or the abort's error. */
  run(
    commandId: string,
    command: RunnerCommand,
    deadlineMs: number | undefined,
    work: CommandWork,
  ): Promise<Record<string, unknown>> {
    const controller = new AbortController();
    this.#running.set(commandId, controller);
    // Node's timers take 2^31-1 ms at most (a longer one fires at once).
    const ms = Math.min(deadlineMs ?? RUNNER_COMMAND_DEADLINE_MS, 2 ** 31 - 1);
    const timer = setTimeout(
      () =>
        controller.abort(
          new CodedError(
            "DEADLINE_EXCEEDED",
            `the ${command.kind} command ran past its deadline of ${ms} ms`,
          ),
        ),
      ms,
    );
    const aborted = new Promise<never>((_, reject) =>
      controller.signal.addEventListener("abort", () => reject(controller.signal.reason), { once: true }),
    );
    return Promise.race([work(command, controller.signal), aborted]).finally(() => {
      clearTimeout(timer);
      if (this.#running.get(commandId) === controller) this.#running.delete(commandId);
    });
  }

  /** The server stopped waiting: false when the command is not running (done, or unknown). */
  cancel(commandId: string): boolean {
    const controller = this.#running.get(commandId);
    if (!controller) return false;
    controller.abort(new CodedError("CANCELLED", "the server cancelled the command"));
    return true;
  }

  /** The runner stops: every command's work is told to stop. */
  cancelAll(): void {
    for (const controller of this.#running.values())
      controller.abort(new CodedError("CANCELLED", "the runner is stopping"));
    this.#running.clear();
  }

  get size(): number {
    return this.#running.size;
  }
}
