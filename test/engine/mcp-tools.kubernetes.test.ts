/**
 * MCP tools on the test bed's Kubernetes cluster (mcp-tools-scenarios.ts): compass and hermes
 * session pods whose NetworkPolicy allows the runner's gateway and not the MCP server; engine-side
 * checks through the API server (pod spec, the credentials Secret).
 */
import { kubernetesProbe } from "../support/engine-probes.ts";
import { applyTestbedEnv } from "../support/testbed.ts";
import { mcpToolsScenarios } from "./mcp-tools-scenarios.ts";

applyTestbedEnv();

mcpToolsScenarios({ engine: "kubernetes", probe: () => kubernetesProbe("agent-sessions") });
