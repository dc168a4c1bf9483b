import type { Logger } from "./observability/log.ts";
import { Metrics } from "./observability/metrics.ts";
import { timeRunnerCommands } from "./runners/command-metrics.ts";
import { agentLabels } from "./lifecycle/gateway-reports.ts";
import type { RunnerHub } from "./runners/runner-hub.ts";
import type { HarnessStore } from "./store/harness-store.ts";
import type { Store } from "./store/store.ts";

export type ServerMetrics = {
  metrics: Metrics;
};

/**
 * The server's metrics and their sources: agent sessions by state (the store), HarnessSessions
 * by phase (the HarnessSession store, read at scrape time),
 * attached runner links, the duration of every runner command, and the model calls the runners'
 * gateways relayed or refused (by namespace and Agent).
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
  options.hub.onGatewayReport((report) => {
    const labels = agentLabels(report.workspace);
    if (report.kind === "usage")
      metrics.recordGatewayCall(
        labels,
        report.report.usage === "unavailable" ? undefined : report.report.usage,
      );
    else if (report.kind === "refused") metrics.recordGatewayRefusal(labels, report.refusal.reason);
  });
  return { metrics };
}
