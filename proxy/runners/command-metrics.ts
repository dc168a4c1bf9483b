import type { RunnerCommand } from "../../contracts/runner-protocol.ts";
import type { Metrics } from "../observability/metrics.ts";
import type { CommandOutcome } from "../lifecycle/runner-directory.ts";
import type { RunnerHub } from "./runner-hub.ts";

/**
 * Times every command the hub sends a runner (by kind and result code), including the ones the
 * hub sends itself. Wraps the instance's `command` so the hub needs no metrics dependency; the
 * wrapped method keeps its contract (never throws, failures are values).
 */
export function timeRunnerCommands(hub: RunnerHub, metrics: Metrics): void {
  const send = hub.command.bind(hub);
  hub.command = async <C extends RunnerCommand>(
    runnerId: string,
    command: C,
    timeoutMs?: number,
    bulk?: Uint8Array,
  ): Promise<CommandOutcome<C>> => {
    const started = performance.now();
    const outcome = await send(runnerId, command, timeoutMs, bulk);
    metrics.recordRunnerCommand(
      command.kind,
      outcome.ok ? "OK" : outcome.error.code,
      (performance.now() - started) / 1000,
    );
    return outcome;
  };
}
