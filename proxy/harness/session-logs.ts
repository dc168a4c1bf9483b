import { CodedError } from "../../contracts/errors.ts";
import { HARNESS_SESSION_KIND } from "../../contracts/harness-session.ts";
import { type LogLine, type LogQuery, type SessionLogsReply, tailOf } from "../../contracts/session-logs.ts";
import type { RunnerDirectory } from "../lifecycle/runner-directory.ts";
import type { HarnessStore } from "../store/harness-store.ts";
import type { Store } from "../store/store.ts";

export type SessionLogsOptions = {
  harness: HarnessStore;
  store: Pick<Store, "getWorkspace">;
  runners: Pick<RunnerDirectory, "command">;
};

const LOGS_TIMEOUT_MS = 20_000;
/** How often `follow` asks the runner for what came since. */
export const FOLLOW_POLL_MS = 1_000;

/**
 * `GET …/harnesssessions/{name}/logs` (issue 42): what the runner saw of the session's processes
 * (contracts/session-logs.ts), asked of the runner holding its workspace (`session_logs`). Any
 * phase with a workspace, a Failed one above all (that is when logs are wanted); a session never
 * provisioned, or whose workspace is gone, answers no lines. An observation: not activity.
 */
export class SessionLogsReader {
  readonly #o: SessionLogsOptions;

  constructor(options: SessionLogsOptions) {
    this.#o = options;
  }

  async read(namespace: string, name: string, query: Omit<LogQuery, "follow">): Promise<SessionLogsReply> {
    const record = await this.#o.harness.getHarnessSession(namespace, name);
    const label = `${HARNESS_SESSION_KIND} ${namespace}/${name}`;
    if (!record) throw new CodedError("NOT_FOUND", `${label} not found`);
    const workspace =
      record.container_name !== undefined
        ? await this.#o.store.getWorkspace(record.container_name)
        : undefined;
    if (!workspace) return { namespace, name, lines: [], truncated: false };
    const outcome = await this.#o.runners.command(
      workspace.runner_id,
      {
        kind: "session_logs",
        container_name: workspace.container_name,
        tail_lines: query.tailLines,
        ...(query.sinceTime ? { since_time: new Date(query.sinceTime).toISOString() } : {}),
      },
      LOGS_TIMEOUT_MS,
    );
    if (!outcome.ok)
      throw new CodedError(outcome.error.code, `${label}: ${outcome.error.message}`, outcome.error.details);
    const lines = outcome.result.lines as LogLine[];
    const tail = tailOf(lines, query.tailLines, query.limitBytes);
    return { namespace, name, lines: tail.lines, truncated: tail.truncated || outcome.result.truncated };
  }
}
