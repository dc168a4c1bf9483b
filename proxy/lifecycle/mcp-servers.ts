import { CodedError } from "../../contracts/errors.ts";
import {
  effectiveTools,
  MCP_TIMEOUT_DEFAULT_MS,
  type MCPServer,
  type McpServerGrant,
} from "../../contracts/mcp.ts";
import { parseDuration } from "../../contracts/duration.ts";
import type { Agent, AgentRuntime } from "../../contracts/resources.ts";
import type { Store } from "../store/store.ts";
import type { Admission } from "./admission.ts";
import { offeredCredential } from "./session-spec-builder.ts";

/**
 * The server's side of MCP servers for sessions (issue 39, contracts/mcp.ts): an MCPServer is
 * admitted when written (its URL a destination the operator allows, its secretRefs offered), and
 * at every provision an Agent's bindings become the grants the runner's gateway enforces: the
 * narrowed tool lists, the credential headers with their values, the timeout.
 */

/**
 * The server's URL is a destination the gateway connects to with its credentials: it must be one
 * the operator allows (loopback, link-local and metadata refused unless AGENT_SESSIONS_EGRESS_ALLOW
 * lists them), and every secretRef names a variable offered to the namespace.
 */
export function assertMcpServerAdmitted(
  server: MCPServer,
  admission: Admission,
  offered: Readonly<Record<string, string | undefined>>,
  code: "INVALID_ARGUMENT" | "FAILED_PRECONDITION" = "INVALID_ARGUMENT",
): void {
  const { namespace, name } = server.metadata;
  admission.egress.assertGatewayUpstreamAllowed(server.spec.url ?? "", `MCPServer ${namespace}/${name}`, {
    code,
    field: "spec.url",
    what: "its MCP server",
    credential: "the MCPServer's credentials",
  });
  for (const [index, credential] of server.spec.credentials.entries()) {
    if (credential.secretRef === undefined) continue;
    const read = offeredCredential(namespace, credential.secretRef.env, offered);
    if (!read.ok)
      throw new CodedError(
        code,
        `invalid MCPServer ${namespace}/${name}: credential ${credential.name} refers to environment variable ${credential.secretRef.env}, ${read.why}`,
        {
          reason: read.reason,
          field_violations: [{ field: `spec.credentials.${index}.secretRef.env`, description: read.why }],
        },
      );
  }
}

/**
 * The gateway grants of an Agent's MCP servers; none when it binds none. FAILED_PRECONDITION (a
 * session's binding is then Invalid with this message) when its runtime does not declare `mcp`, a
 * server is missing, its URL is not allowed or a credential cannot be read.
 */
export async function mcpGrantsOf(
  store: Pick<Store, "getResource">,
  agent: Agent,
  runtime: AgentRuntime,
  admission: Admission,
  offered: Readonly<Record<string, string | undefined>>,
): Promise<McpServerGrant[]> {
  const bindings = agent.spec.mcpServers ?? [];
  if (bindings.length === 0) return [];
  const { namespace } = agent.metadata;
  const agentRef = `${namespace}/${agent.metadata.name}`;
  if (!runtime.spec.capabilities.includes("mcp"))
    throw new CodedError(
      "FAILED_PRECONDITION",
      `Agent ${agentRef} binds MCP servers (${bindings.map((b) => b.name).join(", ")}), but its runtime AgentRuntime ${namespace}/${runtime.metadata.name} does not declare the capability mcp: its agent cannot call MCP tools`,
      { reason: "McpUnsupported" },
    );
  const grants: McpServerGrant[] = [];
  for (const binding of bindings) {
    const server = (await store.getResource("MCPServer", namespace, binding.name)) as MCPServer | undefined;
    if (!server)
      throw new CodedError(
        "FAILED_PRECONDITION",
        `MCPServer ${namespace}/${binding.name} of Agent ${agentRef} not found`,
        {
          reason: "McpServerNotFound",
        },
      );
    assertMcpServerAdmitted(server, admission, offered, "FAILED_PRECONDITION");
    const headers: Record<string, string> = {};
    for (const credential of server.spec.credentials) {
      const value =
        credential.value ??
        (() => {
          const read = offeredCredential(namespace, credential.secretRef?.env ?? "", offered);
          return read.ok ? read.value : "";
        })();
      headers[credential.header] = `${credential.prefix ?? ""}${value}`;
    }
    const tools = effectiveTools(server.spec, binding);
    grants.push({
      name: binding.name,
      url: server.spec.url ?? "",
      ...(tools.allow ? { allow: tools.allow } : {}),
      deny: tools.deny,
      headers,
      timeout_ms: server.spec.timeout
        ? (parseDuration(server.spec.timeout) ?? MCP_TIMEOUT_DEFAULT_MS)
        : MCP_TIMEOUT_DEFAULT_MS,
    });
  }
  return grants;
}
