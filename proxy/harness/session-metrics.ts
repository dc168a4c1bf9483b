import { CodedError } from "../../contracts/errors.ts";
import { HARNESS_SESSION_KIND } from "../../contracts/harness-session.ts";
import type { SessionMetricsReply } from "../../contracts/session-metrics.ts";
import type { RunnerDirectory } from "../lifecycle/runner-directory.ts";
import type { HarnessStore } from "../store/harness-store.ts";
import type { Store } from "../store/store.ts";

export type SessionMetricsOptions = {
  harness: HarnessStore;
  store: Pick<Store, "getWorkspace">;
  runners: Pick<RunnerDirectory, "command" | "connectedRunners">;
};

/** The engine takes about a second for its CPU sample; a runner that does not answer by then is UNAVAILABLE. */
const METRICS_TIMEOUT_MS = 20_000;

/** Phases with a workload to measure (a Paused one is frozen: no CPU, its memory kept). */
const MEASURABLE = new Set(["Ready", "Paused", "Draining", "Pending"]);

/**
 * `GET …/harnesssessions/{name}/metrics` (issue 40): what the session's workload uses now, asked of
 * the runner that holds it (`session_metrics`), which reads the engine. An observation: it is not
 * activity (a paused or idle session stays as it is). FAILED_PRECONDITION when the session has no
 * running workload (Stopped, Failed, not provisioned yet), naming its phase.
 */
export class SessionMetricsReader {
  readonly #o: SessionMetricsOptions;

  constructor(options: SessionMetricsOptions) {
    this.#o = options;
  }

  async read(namespace: string, name: string): Promise<SessionMetricsReply> {
    const record = await this.#o.harness.getHarnessSession(namespace, name);
    const label = `${HARNESS_SESSION_KIND} ${namespace}/${name}`;
    if (!record) throw new CodedError("NOT_FOUND", `${label} not found`);
    const workspace =
      record.container_name !== undefined
        ? await this.#o.store.getWorkspace(record.container_name)
        : undefined;
    if (!workspace || !MEASURABLE.has(record.phase))
      throw new CodedError(
        "FAILED_PRECONDITION",
        `${label} is ${record.phase}: it has no running workload to measure${record.phase === "Stopped" ? " (resume it first)" : ""}`,
      );
    const outcome = await this.#o.runners.command(
      workspace.runner_id,
      { kind: "session_metrics", container_name: workspace.container_name },
      METRICS_TIMEOUT_MS,
    );
    if (!outcome.ok)
      throw new CodedError(outcome.error.code, `${label}: ${outcome.error.message}`, outcome.error.details);
    // It just answered: connected.
    const runner = this.#o.runners.connectedRunners().find((r) => r.runner_id === workspace.runner_id);
    if (!runner) throw new CodedError("UNAVAILABLE", `${label}: its runner went away while it was measured`);
    return { namespace, name, phase: record.phase, engine: runner.engine, metrics: outcome.result.metrics };
  }
}
