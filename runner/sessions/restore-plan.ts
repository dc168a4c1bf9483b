/**
 * What a restarted runner does with each session of the set it saved before (runner/sessions/session-file.ts),
 * as a pure function of the saved entry and what the engine says of its workload now. The
 * previous process took every agent with it (their exec streams ended), but not the workloads:
 * a container or pod that still runs is served again as it is, with a fresh agent started in it.
 * One that stopped while the runner was down (an engine restart stops every container) cannot
 * take an agent: the session is reported ERRORED `WorkspaceNotRunning`, and the server's
 * HarnessSession controller brings a session that should run back up (proxy/PROTOCOL.md §5).
 */
import type { RunnerSessionReport } from "../../contracts/runner-protocol.ts";
import { SessionReasons } from "../../contracts/session-reasons.ts";

export type RestoreAction =
  /** The workload runs: start the agent again in it (same container, same session id). */
  | { kind: "restart-agent" }
  /** Keep the session ERRORED (for the server's reload or stop), with this reason. */
  | { kind: "keep-errored"; reason: string | undefined }
  /** Nothing to keep: the session was on its way out (STOPPING, STOPPED) and its agent is gone. */
  | { kind: "drop" };

/** `workloadRunning` is asked of the engine only for live sessions; undefined when not asked. */
export function restoreAction(
  saved: Pick<RunnerSessionReport, "state" | "reason">,
  workloadRunning: boolean | undefined,
): RestoreAction {
  switch (saved.state) {
    case "ERRORED":
      return { kind: "keep-errored", reason: saved.reason };
    case "STARTING":
    case "READY":
      return workloadRunning
        ? { kind: "restart-agent" }
        : { kind: "keep-errored", reason: SessionReasons.WorkspaceNotRunning };
    // STOPPING: the agent went with the previous process, so the stop is done. DISCONNECTED is
    // the server's word for a lost link; a runner never saves it.
    case "STOPPING":
    case "STOPPED":
    case "DISCONNECTED":
      return { kind: "drop" };
    default: {
      const exhaustive: never = saved.state;
      return exhaustive;
    }
  }
}

/** Whether the engine must be asked about the workload of a saved session. */
export function needsWorkloadCheck(saved: Pick<RunnerSessionReport, "state">): boolean {
  return saved.state === "STARTING" || saved.state === "READY";
}
