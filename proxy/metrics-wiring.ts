import type { Logger } from "./log.ts";
import { Metrics } from "./metrics.ts";
import { timeRunnerCommands } from "./command-metrics.ts";
import type { RunnerHub } from "./runner-hub.ts";
import { SqliteHarnessStore } from "./store/sqlite-harness-store.ts";
import type { Store } from "./store/store.ts";

export type ServerMetrics = {
  metrics: Metrics;
  close(): Promise<void>;
};

/**
 * The server's metrics and their sources: agent sessions by state (the store), HarnessSessions
 * by phase (a connection of their own to the HarnessSession tables, read at scrape time),
 * attached runner links and the duration of every runner command.
 */
export function startMetrics(options: {
  store: Store;
  hub: RunnerHub;
  /** The server's SQLite file. */
  databasePath: string;
  log: Logger;
}): ServerMetrics {
  const metrics = new Metrics({ log: options.log });
  const harness = new SqliteHarnessStore(options.databasePath);
  metrics.observe({
    sessionStates: () => options.store.countSessionsByState(),
    harnessPhases: () => harness.countHarnessSessionsByPhase(),
    runnerLinks: () => options.hub.connectedRunners().length,
  });
  timeRunnerCommands(options.hub, metrics);
  return { metrics, close: () => harness.close() };
}
