/**
 * What a compass session is configured with, from the workload's environment (infra/*-session.ts
 * sets it from the Agent): the model endpoint (MODEL_BASE_URL, MODEL_NAME, the key in
 * MODEL_API_KEY), the tools allowed (COMPASS_TOOLS, comma-separated, like pi's PI_TOOLS), and the
 * workspace whose `.compass/` keeps the conversations.
 */
import { join } from "node:path";
import { type McpSettings, mcpSettings } from "../kit/mcp-client.ts";
import { TOOL_NAMES, type ToolName } from "./tools.ts";

export type CompassSettings = {
  workspace: string;
  /** Conversations, one JSON file each. @default <workspace>/.compass */
  stateDir: string;
  model?: { baseUrl: string; name: string };
  apiKey?: string;
  tools: ToolName[];
  /** The Agent's MCP servers behind the runner's gateway (MCP_SERVERS, MCP_GATEWAY_TOKEN); absent: none. */
  mcp?: McpSettings;
};

export function compassSettings(source: NodeJS.ProcessEnv = process.env): CompassSettings {
  const workspace = source.AGENT_WORKSPACE ?? "/workspace";
  const tools = (source.COMPASS_TOOLS ?? TOOL_NAMES.join(","))
    .split(",")
    .map((t) => t.trim())
    .filter(Boolean);
  const unknown = tools.filter((t) => !(TOOL_NAMES as readonly string[]).includes(t));
  if (unknown.length)
    throw new Error(
      `COMPASS_TOOLS names unknown tools: ${unknown.join(", ")} (known: ${TOOL_NAMES.join(", ")})`,
    );
  return {
    workspace,
    stateDir: source.COMPASS_STATE_DIR ?? join(workspace, ".compass"),
    ...(source.MODEL_BASE_URL
      ? { model: { baseUrl: source.MODEL_BASE_URL, name: source.MODEL_NAME ?? "default" } }
      : {}),
    ...(source.MODEL_API_KEY ? { apiKey: source.MODEL_API_KEY } : {}),
    tools: [...new Set(tools)] as ToolName[],
    ...(mcpSettings(source) ? { mcp: mcpSettings(source) } : {}),
  };
}
