import type { RunnerCommand } from "../../contracts/runner-protocol.ts";
import type { CommandOutcome } from "../runners/runner-hub.ts";
import type { RunnerRecord } from "../store/store.ts";

/** What the lifecycle needs of the runner link (RunnerHub implements it). */
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
