import type { RunnerCommand } from "../../contracts/runner-protocol.ts";
import type { ApiErrorBody } from "../../contracts/errors.ts";
import type { CommandResultOf } from "../../contracts/runner-results.ts";
import type { RunnerRecord } from "../store/store.ts";

/** A value, or the error with its gRPC code: what crosses the runner link never throws. */
export type Outcome<T> = { ok: true; result: T } | { ok: false; error: ApiErrorBody };
/** What a runner command returns, typed by its kind. */
export type CommandOutcome<C extends RunnerCommand> = Outcome<CommandResultOf<C["kind"]>>;
/**
 * One piece of a relayed reply, as the runner sends it (PROTOCOL.md `relay_chunk`): `data` text
 * (an agent's reply) or base64 (a download's bytes), or, from a binary frame (PROTOCOL.md §9),
 * the raw `bytes` with `data` empty. `chunkBytes` reads a download's piece either way.
 */
export type RelayChunk = {
  relay_id: string;
  data: string;
  done: boolean;
  status?: number | undefined;
  bytes?: Buffer | undefined;
  /** A port relay's head (issue 40): the session's reply headers. */
  headers?: [string, string][] | undefined;
  /** A port socket's message from the session (issue 40), `data` base64. */
  message?: "text" | "binary" | undefined;
};

/** A download's piece as bytes, whichever way it came (binary frame or base64). */
export function chunkBytes(chunk: RelayChunk): Buffer {
  return chunk.bytes ?? Buffer.from(chunk.data, "base64");
}

/**
 * What the lifecycle needs of the runner link: the port (RunnerHub, runners/, implements it; this
 * module imports nothing of its adapter).
 */
export interface RunnerDirectory {
  /** Runners attached and reconciled. */
  connectedRunners(): RunnerRecord[];
  isConnected(runnerId: string): boolean;
  /** Never throws: failures are `{ok: false, error}` values with a gRPC code. */
  /**
   * `bulk`: an upload piece's bytes for a `workspace_write` or `snapshot_write` whose `data` is
   * empty; the link carries them raw when the runner takes binary frames, else as base64.
   */
  command<C extends RunnerCommand>(
    runnerId: string,
    command: C,
    timeoutMs?: number,
    bulk?: Uint8Array,
  ): Promise<CommandOutcome<C>>;
  /**
   * How many pieces of one upload (`snapshot_write`) may be in flight to the runner at once
   * (PROTOCOL.md §7); absent: 1, each piece sent after the previous one's answer.
   */
  uploadWindow?(runnerId: string): number;
}
