/**
 * What `GET /readyz` answers beyond "the store is open": whether any runner can serve
 * (issue 34 item 2). Without one every session stays Pending, and a server that says "ready"
 * then hides why.
 *
 * The status stays 200 when the store is open, runner or not: a control-plane pod runs
 * `serve --no-runner` behind a Service that routes only to Ready pods, and its runners dial it
 * through that Service, so a 503 for "no runner" would keep every runner out for good
 * (infra/control-plane/). The body says it instead.
 */
import type { RunnerDirectory } from "../lifecycle/runner-directory.ts";

export type Readiness = {
  /** `ready`: a runner takes work; `no_runner`: none does, sessions wait as Pending. */
  status: "ready" | "no_runner";
  runners: { connected: number; accepting: number };
  /** Why no runner can serve and what to do, when none can. */
  message?: string;
};

export function readiness(runners: Pick<RunnerDirectory, "connectedRunners">): Readiness {
  const connected = runners.connectedRunners();
  const accepting = connected.filter((r) => !r.draining);
  const counts = { connected: connected.length, accepting: accepting.length };
  if (accepting.length > 0) return { status: "ready", runners: counts };
  const message =
    connected.length === 0
      ? "no runner is connected, so sessions stay Pending: start one (agent-sessions runner --server URL), or run `agent-sessions serve` without --no-runner"
      : `every connected runner is draining: ${connected.map((r) => r.runner_name).join(", ")}; undrain one (agent-sessions undrain NAME) or start another`;
  return { status: "no_runner", runners: counts, message };
}
