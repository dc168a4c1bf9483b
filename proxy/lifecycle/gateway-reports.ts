import type { GatewayToolCall } from "../../contracts/mcp.ts";
import type { GatewayRefusal, GatewayUsageReport } from "../../contracts/runner-protocol.ts";
import { parseAgentRef } from "../../contracts/resources.ts";
import type { RelayRoute, WorkspaceRecord } from "../store/store.ts";

/**
 * A report of the runner's model gateway (issue 35) the hub accepted: the runner that sent it
 * owns the workspace it names. `workspace` is the server's own record, so the Agent and
 * namespace come from the store, never from what the runner wrote in the report.
 */
export type GatewayReport =
  | { kind: "usage"; workspace: GatewayWorkspace; report: GatewayUsageReport }
  | { kind: "refused"; workspace: GatewayWorkspace; refusal: GatewayRefusal }
  /** One MCP tool call through the gateway (issue 39), allowed or refused. */
  | { kind: "tool"; workspace: GatewayWorkspace; call: GatewayToolCall };

/** What a report's listeners know of its workspace (read narrowly: a report comes with every model call). */
export type GatewayWorkspace = Pick<RelayRoute, "container_name" | "runner_id" | "agent_ref">;

/** Told of every accepted report, in the order its runner sent them. */
export type GatewayReportListener = (report: GatewayReport) => Promise<void> | void;

/** The metric labels of a workspace's Agent: `{namespace, agent}` (the Agent's name). */
export function agentLabels(workspace: Pick<WorkspaceRecord, "agent_ref">): {
  namespace: string;
  agent: string;
} {
  const { namespace, name } = parseAgentRef(workspace.agent_ref);
  return { namespace, agent: name };
}
