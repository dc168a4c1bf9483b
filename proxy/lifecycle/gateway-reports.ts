import type { GatewayToolCall } from "../../contracts/mcp.ts";
import type { GatewayRefusal, GatewayUsageReport } from "../../contracts/runner-protocol.ts";
import { parseAgentRef } from "../../contracts/resources.ts";
import type { WorkspaceRecord } from "../store/store.ts";

/**
 * A report of the runner's model gateway (issue 35) the hub accepted: the runner that sent it
 * owns the workspace it names. `workspace` is the server's own record, so the Agent and
 * namespace come from the store, never from what the runner wrote in the report.
 */
export type GatewayReport =
  | { kind: "usage"; workspace: WorkspaceRecord; report: GatewayUsageReport }
  | { kind: "refused"; workspace: WorkspaceRecord; refusal: GatewayRefusal }
  /** One MCP tool call through the gateway (issue 39), allowed or refused. */
  | { kind: "tool"; workspace: WorkspaceRecord; call: GatewayToolCall };

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
