import { ATTACHED_STATES } from "../lifecycle/session-states.ts";
import type { SessionJournal } from "../lifecycle/session-journal.ts";
import type { Logger } from "../observability/log.ts";
import { agentLabels, type GatewayReport } from "../lifecycle/gateway-reports.ts";
import type { HarnessStore } from "../store/harness-store.ts";
import type { Store } from "../store/store.ts";

export type GatewayAccountingOptions = {
  harness: Pick<HarnessStore, "addGatewayUsage">;
  store: Pick<Store, "listSessions">;
  journal: Pick<SessionJournal, "append">;
  log: Logger;
};

/**
 * The session side of the runner's model gateway (issue 35), fed the reports the hub accepted
 * (gateway-reports.ts): each model call counts into the HarnessSession on its workspace
 * (`status.usage`), and a refused call becomes an `error` event of the workspace's agent session
 * (`GET /v1/events`) with the refusal's reason and message.
 */
export class GatewayAccounting {
  readonly #o: GatewayAccountingOptions;

  constructor(options: GatewayAccountingOptions) {
    this.#o = options;
  }

  readonly take = async (report: GatewayReport): Promise<void> => {
    switch (report.kind) {
      case "usage": {
        // Not waited for: the count is group-committed with this turn's other writes (the next
        // reports', the request's settlement after it), in the order asked; the runner's next
        // report need not wait for the commit.
        const containerName = report.workspace.container_name;
        void this.#o.harness.addGatewayUsage(containerName, report.report.usage).then(
          (counted) => {
            // An RPC session's workspace has no HarnessSession: its calls show in the metrics only.
            if (!counted)
              this.#o.log("debug", "gateway usage for a workspace without a HarnessSession", {
                container_name: containerName,
              });
          },
          (error: unknown) =>
            this.#o.log("error", "gateway usage not counted", {
              container_name: containerName,
              error: String(error),
            }),
        );
        return;
      }
      case "refused": {
        const sessionId = await this.#sessionOf(report.workspace.container_name);
        if (sessionId === undefined) {
          this.#o.log("warn", "gateway refusal for a workspace without an agent session; dropped", {
            container_name: report.workspace.container_name,
            reason: report.refusal.reason,
          });
          return;
        }
        await this.#o.journal.append(sessionId, {
          type: "error",
          payload: {
            source: "gateway",
            reason: report.refusal.reason,
            message: withoutGatewayTokens(report.refusal.message),
          },
        });
        return;
      }
      case "tool":
        return this.#toolCall(report);
      default: {
        const exhaustive: never = report;
        return exhaustive;
      }
    }
  };

  /**
   * An MCP tool call (issue 39): an `audit` log line (who, which server and tool, how it ended,
   * how long; never its arguments or result) and a compass.v1 `tool` frame on the agent session's
   * events (`source: "mcp"`), which the web UI shows beside the agent's own tool calls.
   */
  async #toolCall(report: Extract<GatewayReport, { kind: "tool" }>): Promise<void> {
    const { call, workspace } = report;
    const labels = agentLabels(workspace);
    const message = call.message === undefined ? {} : { message: withoutGatewayTokens(call.message) };
    this.#o.log("info", "audit", {
      kind: "mcp_tool_call",
      namespace: labels.namespace,
      agent: labels.agent,
      container_name: workspace.container_name,
      server: call.server,
      tool: call.tool,
      outcome: call.outcome,
      duration_ms: Math.round(call.duration_ms),
    });
    const sessionId = await this.#sessionOf(workspace.container_name);
    if (sessionId === undefined) return;
    await this.#o.journal.append(sessionId, {
      type: "tool",
      payload: {
        source: "mcp",
        server: call.server,
        name: call.tool,
        tool: call.tool,
        outcome: call.outcome,
        duration_ms: Math.round(call.duration_ms),
        ...message,
      },
    });
  }

  /** The agent session the workspace runs (else its latest): the one whose events a client follows. */
  async #sessionOf(containerName: string): Promise<string | undefined> {
    const sessions = await this.#o.store.listSessions({ containerName });
    const attached = sessions.filter((s) => (ATTACHED_STATES as readonly string[]).includes(s.state));
    return (attached.at(-1) ?? sessions.at(-1))?.session_id;
  }
}

/**
 * The gateway writes the message for the agent, not for the log; a token of the gateway
 * (`asgw_…`) that found its way into it never reaches an event.
 */
export function withoutGatewayTokens(message: string): string {
  return message.replace(/asgw_[A-Za-z0-9_-]+/g, "asgw_[redacted]");
}
