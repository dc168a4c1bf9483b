/**
 * The session side of MCP (issue 39): a small Streamable HTTP client (MCP specification
 * 2025-06-18, "Transports") a runtime uses to offer its agent the tools of the Agent's MCP servers
 * as its own tools. It only ever talks to the runner's gateway (`MCP_SERVERS`: name → gateway URL)
 * with the session's gateway token (`MCP_GATEWAY_TOKEN`): the servers' own URLs and credentials
 * never reach a session. The gateway lists only the tools the session may call and refuses the
 * others itself; a refusal comes back as the call's error, which the agent reads as the tool's
 * result.
 */
import { MCP_SERVERS_ENV, MCP_TOKEN_ENV } from "../../contracts/mcp.ts";

const PROTOCOL_VERSION = "2025-06-18";

export type McpSettings = { servers: Record<string, string>; token: string };

/** The session's MCP servers from its environment; undefined when it has none. */
export function mcpSettings(source: NodeJS.ProcessEnv = process.env): McpSettings | undefined {
  const listed = source[MCP_SERVERS_ENV];
  const token = source[MCP_TOKEN_ENV];
  if (!listed || !token) return undefined;
  const servers = JSON.parse(listed) as Record<string, string>;
  return Object.keys(servers).length > 0 ? { servers, token } : undefined;
}

export type McpTool = {
  server: string;
  name: string;
  description: string;
  inputSchema: Record<string, unknown>;
};

export type McpCallResult = { text: string; isError: boolean };

/** One MCP server behind the gateway: initialize once, then list and call tools. */
export class McpGatewayClient {
  readonly server: string;
  readonly #url: string;
  readonly #token: string;
  #session: string | undefined;
  #ready: Promise<void> | undefined;
  #id = 0;

  constructor(server: string, url: string, token: string) {
    this.server = server;
    this.#url = url;
    this.#token = token;
  }

  async listTools(): Promise<McpTool[]> {
    await this.#initialize();
    const tools: McpTool[] = [];
    let cursor: string | undefined;
    do {
      const result = (await this.#request("tools/list", cursor ? { cursor } : {})) as {
        tools?: { name: string; description?: string; inputSchema?: Record<string, unknown> }[];
        nextCursor?: string;
      };
      for (const tool of result.tools ?? [])
        tools.push({
          server: this.server,
          name: tool.name,
          description: tool.description ?? "",
          inputSchema: tool.inputSchema ?? { type: "object", properties: {} },
        });
      cursor = result.nextCursor;
    } while (cursor);
    return tools;
  }

  /** A tool's result as text; a refusal or failure is `isError` with the gateway's or server's message. */
  async callTool(name: string, args: Record<string, unknown>, signal?: AbortSignal): Promise<McpCallResult> {
    await this.#initialize();
    try {
      const result = (await this.#request("tools/call", { name, arguments: args }, signal)) as {
        content?: { type: string; text?: string }[];
        isError?: boolean;
      };
      const text = (result.content ?? [])
        .map((part) => (part.type === "text" ? (part.text ?? "") : `[${part.type}]`))
        .join("\n");
      return { text, isError: result.isError === true };
    } catch (error) {
      if (error instanceof McpRpcError) return { text: error.message, isError: true };
      throw error;
    }
  }

  #initialize(): Promise<void> {
    this.#ready ??= (async () => {
      await this.#request("initialize", {
        protocolVersion: PROTOCOL_VERSION,
        capabilities: {},
        clientInfo: { name: "agent-sessions", version: "1" },
      });
      await this.#post({ jsonrpc: "2.0", method: "notifications/initialized" });
    })().catch((error: unknown) => {
      this.#ready = undefined;
      throw error;
    });
    return this.#ready;
  }

  async #request(method: string, params: Record<string, unknown>, signal?: AbortSignal): Promise<unknown> {
    const id = ++this.#id;
    const reply = await this.#post({ jsonrpc: "2.0", id, method, params }, signal);
    const message = reply.find((m) => m.id === id);
    if (!message) throw new Error(`MCP server ${this.server}: no answer to ${method}`);
    if (message.error) throw new McpRpcError(String(message.error.message ?? "error"));
    return message.result;
  }

  /** POSTs one message; the JSON-RPC messages of the answer (JSON or an SSE stream). */
  async #post(body: Record<string, unknown>, signal?: AbortSignal): Promise<RpcMessage[]> {
    const res = await fetch(this.#url, {
      method: "POST",
      headers: {
        authorization: `Bearer ${this.#token}`,
        "content-type": "application/json",
        accept: "application/json, text/event-stream",
        "mcp-protocol-version": PROTOCOL_VERSION,
        ...(this.#session ? { "mcp-session-id": this.#session } : {}),
      },
      body: JSON.stringify(body),
      ...(signal ? { signal } : {}),
    });
    const session = res.headers.get("mcp-session-id");
    if (session) this.#session = session;
    const text = await res.text();
    if (res.status === 202 || text.trim() === "") return [];
    const type = res.headers.get("content-type") ?? "";
    const messages = type.includes("text/event-stream") ? sseMessages(text) : [parseMessage(text)];
    if (!res.ok && !messages.some((m) => m?.error))
      throw new Error(`MCP server ${this.server}: HTTP ${res.status}`);
    return messages.filter((m): m is RpcMessage => m !== undefined);
  }
}

type RpcMessage = { id?: unknown; result?: unknown; error?: { message?: unknown } };

class McpRpcError extends Error {
  override name = "McpRpcError";
}

function parseMessage(text: string): RpcMessage | undefined {
  try {
    return JSON.parse(text) as RpcMessage;
  } catch {
    return undefined;
  }
}

function sseMessages(text: string): (RpcMessage | undefined)[] {
  return text
    .split(/\r?\n\r?\n/)
    .map((event) =>
      event
        .split(/\r?\n/)
        .filter((line) => line.startsWith("data:"))
        .map((line) => line.slice(5).replace(/^ /, ""))
        .join("\n"),
    )
    .filter((data) => data !== "")
    .map(parseMessage);
}

/**
 * The tools of every MCP server of the session, each named `<server>_<tool>` (an OpenAI tool name:
 * letters, digits, `_` and `-`), with the client that calls it.
 */
export async function sessionMcpTools(
  settings: McpSettings,
): Promise<{ name: string; tool: McpTool; client: McpGatewayClient }[]> {
  const out: { name: string; tool: McpTool; client: McpGatewayClient }[] = [];
  for (const [server, url] of Object.entries(settings.servers)) {
    const client = new McpGatewayClient(server, url, settings.token);
    for (const tool of await client.listTools())
      out.push({ name: `${server}_${tool.name}`.replace(/[^A-Za-z0-9_-]/g, "_").slice(0, 64), tool, client });
  }
  return out;
}
