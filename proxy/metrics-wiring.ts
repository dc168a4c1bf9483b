import type { Logger } from "./observability/log.ts";
import { Metrics } from "./observability/metrics.ts";
import { timeRunnerCommands } from "./runners/command-metrics.ts";
import type { RunnerHub } from "./runners/runner-hub.ts";
import type { HarnessStore } from "./store/harness-store.ts";
import type { Store } from "./store/store.ts";

export type ServerMetrics = {
  metrics: Metrics;
};

/**
 * The server's metrics and their sources: agent sessions by state (the store), HarnessSessions
 * by phase (the HarnessSession store, read at scrape time),
 * attached runner links and the duration of every runner command.
 */
export function startMetrics(options: {
  store: Store;
  harnessStore: HarnessStore;
  hub: RunnerHub;
  log: Logger;
}): ServerMetrics {
  const metrics = new Metrics({ log: options.log });
  metrics.observe({
    sessionStates: () => options.store.countSessionsByState(),
    harnessPhases: () => options.harnessStore.countHarnessSessionsByPhase(),
    runnerLinks: () => options.hub.connectedRunners().length,
  });
  timeRunnerCommands(options.hub, metrics);
  return { metrics };
}
