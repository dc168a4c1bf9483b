import type { RunnerCommand } from "../../contracts/runner-protocol.ts";
import type { ApiErrorBody } from "../../contracts/errors.ts";
import type { CommandResultOf } from "../../contracts/runner-results.ts";
import type { RunnerRecord } from "../store/store.ts";

/** A value, or the error with its gRPC code: what crosses the runner link never throws. */
export type Outcome<T> = { ok: true; result: T } | { ok: false; error: ApiErrorBody };
/** What a runner command returns, typed by its kind. */
export type CommandOutcome<C extends RunnerCommand> = Outcome<CommandResultOf<C["kind"]>>;
/** One piece of a relayed reply, as the runner sends it (PROTOCOL.md `relay_chunk`). */
export type RelayChunk = { relay_id: string; data: string; done: boolean; status?: number | undefined };

/**
 * What the lifecycle needs of the runner link: the port (RunnerHub, runners/, implements it; this
 * module imports nothing of its adapter).
 */
export interface RunnerDirectory {
  /** Runners attached and reconciled. */
  connectedRunners(): RunnerRecord[];
  isConnected(runnerId: string): boolean;
  /** Never throws: failures are `{ok: false, error}` values with a gRPC code. */
  command<C extends RunnerCommand>(
    runnerId: string,
    command: C,
    timeoutMs?: number,
  ): Promise<CommandOutcome<C>>;
}
