import { z } from "zod";
import { parseDuration } from "./duration.ts";
import { DnsLabel } from "./session-spec.ts";

/**
 * MCP servers for sessions (issue 39): an `MCPServer` names a Streamable HTTP endpoint (the MCP
 * specification's 2025-06-18 transport), the tools a session may call there, and write-only
 * credentials the runner's gateway sends to it as headers. A session reaches it only through the
 * gateway outside the session (runner/gateway/mcp-forwarder.ts): stdio servers and every other
 * transport are refused for sessions.
 */

/** What a refusal of any other transport names (the invariant, word for word in every message). */
export const MCP_TRANSPORT_INVARIANT =
  "sessions reach MCP servers only over Streamable HTTP through the gateway";

/** An MCP tool's name (the specification's: 1-128 of A-Z a-z 0-9 _ - .). */
export const McpToolName = z
  .string()
  .regex(/^[A-Za-z0-9_.-]{1,128}$/, "must be an MCP tool name: 1-128 of A-Z, a-z, 0-9, _, - and .");

const ToolList = z
  .array(McpToolName)
  .max(256)
  .refine((list) => new Set(list).size === list.length, { message: "tool names must be unique" });

/** An HTTP header name a credential travels in (RFC 9110 token); never one the transport owns. */
const McpHeaderName = z
  .string()
  .regex(/^[A-Za-z0-9-]{1,64}$/, "must be an HTTP header name (A-Z, a-z, 0-9, -)")
  .refine((name) => !RESERVED_MCP_HEADERS.has(name.toLowerCase()), {
    message: "is a header the gateway or the MCP transport sets itself",
  });
const RESERVED_MCP_HEADERS = new Set([
  "host",
  "content-length",
  "content-type",
  "accept",
  "connection",
  "transfer-encoding",
  "mcp-session-id",
  "mcp-protocol-version",
  "last-event-id",
]);

const CredentialName = z
  .string()
  .regex(/^[A-Za-z0-9_.-]{1,64}$/, "must be 1-64 of A-Z, a-z, 0-9, _, - and .");

/**
 * One credential of an MCP server: sent by the gateway as `header: <prefix><value>` on every call
 * to the server (e.g. `Authorization` with prefix `Bearer `). A literal `value` or a `secretRef`
 * to a variable the server offers, exactly as an Agent's credentials (write-only: never returned).
 */
export const McpCredential = z
  .strictObject({
    name: CredentialName,
    header: McpHeaderName,
    /** Put before the value, e.g. `Bearer `. @default "" */
    prefix: z.string().max(64).optional(),
    value: z.string().min(1).max(4096).optional(),
    secretRef: z.strictObject({ env: z.string().regex(/^[A-Z_][A-Z0-9_]*$/) }).optional(),
  })
  .refine((c) => (c.value === undefined) !== (c.secretRef === undefined), {
    message: "exactly one of value or secretRef",
  });
export type McpCredential = z.infer<typeof McpCredential>;

/** Bounds of `spec.timeout`: 1 s to 10 min. @default 60 s */
export const MCP_TIMEOUT_MIN_MS = 1_000;
export const MCP_TIMEOUT_MAX_MS = 10 * 60_000;
export const MCP_TIMEOUT_DEFAULT_MS = 60_000;

const McpTimeout = z.string().refine(
  (text) => {
    const ms = parseDuration(text);
    return ms !== undefined && ms >= MCP_TIMEOUT_MIN_MS && ms <= MCP_TIMEOUT_MAX_MS;
  },
  { message: "must be a duration between 1s and 10m, e.g. 30s" },
);

const uniqueCredentials = <T extends { name: string; header: string }>(list: T[]) =>
  new Set(list.map((c) => c.name)).size === list.length &&
  new Set(list.map((c) => c.header.toLowerCase())).size === list.length;

/** The stdio shape and the transports sessions never get: refused with the invariant named. */
const StdioOrOther = {
  transport: z.string().max(64).optional(),
  command: z.unknown().optional(),
  args: z.unknown().optional(),
  env: z.unknown().optional(),
};

const mcpServerSpec = <C extends z.ZodType>(credential: C) =>
  z
    .strictObject({
      /** The server's Streamable HTTP endpoint, e.g. http://10.213.0.1:8931/mcp */
      url: z.url({ protocol: /^https?$/, error: "must be an http:// or https:// URL" }).optional(),
      /** Tools a session may call; absent: every tool the server lists (but those denied). */
      toolsAllow: ToolList.optional(),
      /** Tools a session may never call (wins over toolsAllow). */
      toolsDeny: ToolList.default([]),
      credentials: z.array(credential).max(16).default([]),
      /** How long one call may take, e.g. `30s` (1s to 10m). @default 60s */
      timeout: McpTimeout.optional(),
      ...StdioOrOther,
    })
    .superRefine((spec, ctx) => {
      const stdio = spec.command !== undefined || spec.args !== undefined || spec.env !== undefined;
      if (stdio || (spec.transport !== undefined && spec.transport !== "streamable-http")) {
        ctx.addIssue({
          code: "custom",
          path: stdio
            ? [spec.command !== undefined ? "command" : spec.args !== undefined ? "args" : "env"]
            : ["transport"],
          message: `${stdio ? "a stdio MCP server (command/args/env)" : `transport ${JSON.stringify(spec.transport)}`} is refused: ${MCP_TRANSPORT_INVARIANT} (give spec.url, transport streamable-http)`,
        });
        return;
      }
      if (spec.url === undefined)
        ctx.addIssue({
          code: "custom",
          path: ["url"],
          message: "required: the server's Streamable HTTP URL",
        });
      if (!uniqueCredentials(spec.credentials as { name: string; header: string }[]))
        ctx.addIssue({
          code: "custom",
          path: ["credentials"],
          message: "credential names and headers must be unique",
        });
    });

export const MCPServerSpec = mcpServerSpec(McpCredential);
export type MCPServerSpec = z.infer<typeof MCPServerSpec>;

const MCP_API_VERSION = "agent-sessions.dev/v1alpha1";
const Meta = z.object({
  name: DnsLabel,
  namespace: DnsLabel.default("default"),
  creationTimestamp: z.string().datetime().optional(),
});

export const MCPServer = z.strictObject({
  apiVersion: z.literal(MCP_API_VERSION),
  kind: z.literal("MCPServer"),
  metadata: Meta,
  spec: MCPServerSpec,
});
export type MCPServer = z.infer<typeof MCPServer>;
export type MCPServerInput = z.input<typeof MCPServer>;

/** A credential as `PUT` takes it: a new value, a secretRef, or `valueSet: true` (keep the stored value). */
export const McpCredentialWrite = z
  .strictObject({
    name: CredentialName,
    header: McpHeaderName,
    prefix: z.string().max(64).optional(),
    value: z.string().min(1).max(4096).optional(),
    secretRef: z.strictObject({ env: z.string().regex(/^[A-Z_][A-Z0-9_]*$/) }).optional(),
    valueSet: z.literal(true).optional(),
  })
  .refine((c) => [c.value, c.secretRef, c.valueSet].filter((x) => x !== undefined).length === 1, {
    message:
      "exactly one of value, secretRef or valueSet: true (valueSet keeps the value already stored under this name)",
  });

export const MCPServerWrite = MCPServer.extend({ spec: mcpServerSpec(McpCredentialWrite) });
export type MCPServerWrite = z.infer<typeof MCPServerWrite>;

/** An MCPServer as the API answers it: credentials write-only (`valueSet: true`, never the value). */
export const MCPServerView = MCPServer.extend({
  spec: mcpServerSpec(
    z.strictObject({
      name: CredentialName,
      header: McpHeaderName,
      prefix: z.string().max(64).optional(),
      secretRef: z.strictObject({ env: z.string() }).optional(),
      valueSet: z.literal(true).optional(),
    }),
  ),
});
export type MCPServerView = z.infer<typeof MCPServerView>;

export function redactedMcpServer(server: MCPServer): MCPServerView {
  const credentials = server.spec.credentials.map(({ value, ...rest }) =>
    value === undefined ? rest : { ...rest, valueSet: true as const },
  );
  return { ...server, spec: { ...server.spec, credentials } };
}

/** An Agent's binding of one MCPServer of its namespace, narrowing (never widening) its tool lists. */
export const AgentMcpServer = z.strictObject({
  /** An MCPServer in the Agent's namespace. */
  name: DnsLabel,
  /** Intersected with the server's toolsAllow. */
  toolsAllow: ToolList.optional(),
  /** Added to the server's toolsDeny. */
  toolsDeny: ToolList.optional(),
});
export type AgentMcpServer = z.infer<typeof AgentMcpServer>;

export const AgentMcpServers = z
  .array(AgentMcpServer)
  .max(16)
  .refine((list) => new Set(list.map((s) => s.name)).size === list.length, {
    message: "MCP server names must be unique",
  });

/**
 * The tools a session may call on a server: allow = the server's ∩ the Agent's (absent on both:
 * every tool), deny = the server's ∪ the Agent's. The Agent narrows, never widens.
 */
export function effectiveTools(
  server: Pick<MCPServerSpec, "toolsAllow" | "toolsDeny">,
  binding: Pick<AgentMcpServer, "toolsAllow" | "toolsDeny">,
): { allow?: string[]; deny: string[] } {
  const deny = [...new Set([...server.toolsDeny, ...(binding.toolsDeny ?? [])])].sort();
  let allow: string[] | undefined;
  if (server.toolsAllow && binding.toolsAllow)
    allow = server.toolsAllow.filter((t) => binding.toolsAllow?.includes(t));
  else allow = server.toolsAllow ?? binding.toolsAllow;
  return allow === undefined ? { deny } : { allow: allow.filter((t) => !deny.includes(t)).sort(), deny };
}

/** May a session call `tool` under these lists? */
export function toolAllowed(
  tools: { allow?: readonly string[]; deny: readonly string[] },
  tool: string,
): boolean {
  if (tools.deny.includes(tool)) return false;
  return tools.allow === undefined || tools.allow.includes(tool);
}

/**
 * What the runner's gateway needs of one MCP server a session may use: sent beside the provision,
 * kept in the runner (its header values are credentials: never in the session, a log or an error).
 */
export const McpServerGrant = z.object({
  /** The MCPServer's name: the session's gateway path is `/mcp/<name>`. */
  name: DnsLabel,
  url: z.url({ protocol: /^https?$/ }),
  /** Absent: every tool but those denied. */
  allow: z.array(z.string()).max(256).optional(),
  deny: z.array(z.string()).max(512),
  /** Header name → value (the credential, prefix included). */
  headers: z.record(z.string(), z.string()),
  timeout_ms: z.number().int().min(MCP_TIMEOUT_MIN_MS).max(MCP_TIMEOUT_MAX_MS),
});
export type McpServerGrant = z.infer<typeof McpServerGrant>;

/** The variable holding the session's gateway token for MCP (a gateway token, never a server's credential). */
export const MCP_TOKEN_ENV = "MCP_GATEWAY_TOKEN";
/** The variable listing the session's MCP servers: JSON `{<name>: <gateway URL>}`. */
export const MCP_SERVERS_ENV = "MCP_SERVERS";

/** The outcome of one tool call through the gateway, as its `tool` frame and audit record say it. */
export const McpCallOutcome = z.enum(["ok", "error", "refused", "timeout", "unreachable"]);
export type McpCallOutcome = z.infer<typeof McpCallOutcome>;

/** One MCP tool call the gateway saw (allowed or refused), reported up the link. */
export const GatewayToolCall = z.object({
  container_name: z.string(),
  agent: z.string().max(200),
  server: z.string().max(63),
  tool: z.string().max(128),
  outcome: McpCallOutcome,
  duration_ms: z.number().nonnegative(),
  /** Why it was refused or failed (never a credential). */
  message: z.string().max(1024).optional(),
});
export type GatewayToolCall = z.infer<typeof GatewayToolCall>;
