/**
 * MCP tools on Docker (mcp-tools-scenarios.ts): compass and hermes sessions on internal networks
 * with no route to the MCP server, reaching it through the runner's gateway only.
 */
import { dockerProbe } from "../support/engine-probes.ts";
import { mcpToolsScenarios } from "./mcp-tools-scenarios.ts";

mcpToolsScenarios({ engine: "docker", probe: () => dockerProbe() });
