import { describe, expect, it } from "vitest";
import type { MCPServer } from "../../contracts/mcp.ts";
import { Agent, AgentRuntime, API_VERSION } from "../../contracts/resources.ts";
import { defaultAdmission } from "./admission.ts";
import { EgressGuard } from "./egress-guard.ts";
import { mcpGrantsOf } from "./mcp-servers.ts";

const runtime = (capabilities: string[]) =>
  AgentRuntime.parse({
    apiVersion: API_VERSION,
    kind: "AgentRuntime",
    metadata: { name: "rt" },
    spec: { image: `127.0.0.1:5000/rt@sha256:${"a".repeat(64)}`, contract: "v1alpha2", capabilities },
  });
const agent = (mcpServers: unknown[]) =>
  Agent.parse({
    apiVersion: API_VERSION,
    kind: "Agent",
    metadata: { name: "bob" },
    spec: { runtimeRef: "rt", mcpServers },
  });
const server: MCPServer = {
  apiVersion: API_VERSION,
  kind: "MCPServer",
  metadata: { name: "tools", namespace: "default" },
  spec: {
    url: "http://10.213.0.1:9000/mcp",
    toolsAllow: ["add", "echo", "rm"],
    toolsDeny: ["rm"],
    credentials: [
      { name: "a", header: "Authorization", prefix: "Bearer ", value: "literal" },
      { name: "b", header: "X-Api-Key", secretRef: { env: "MCP_KEY" } },
    ],
    timeout: "5s",
  },
};
const store = {
  getResource: async (kind: string, _ns: string, name: string) =>
    kind === "MCPServer" && name === "tools" ? server : undefined,
} as Parameters<typeof mcpGrantsOf>[0];
const admission = { ...defaultAdmission(), egress: new EgressGuard({ allow: [{ cidr: "10.213.0.0/16" }] }) };

describe("mcpGrantsOf", () => {
  it("narrows the server's lists by the Agent's and resolves the credential headers", async () => {
    const grants = await mcpGrantsOf(
      store,
      agent([{ name: "tools", toolsAllow: ["add", "rm", "whoami"] }]),
      runtime(["mcp"]),
      admission,
      { MCP_KEY: "from-env" },
    );
    expect(grants).toEqual([
      {
        name: "tools",
        url: "http://10.213.0.1:9000/mcp",
        allow: ["add"],
        deny: ["rm"],
        headers: { Authorization: "Bearer literal", "X-Api-Key": "from-env" },
        timeout_ms: 5_000,
      },
    ]);
  });

  it("an Agent binding none needs nothing of its runtime", async () => {
    expect(await mcpGrantsOf(store, agent([]), runtime([]), admission, {})).toEqual([]);
  });

  it("refuses a runtime that does not declare mcp, saying so", async () => {
    await expect(
      mcpGrantsOf(store, agent([{ name: "tools" }]), runtime(["tools"]), admission, {}),
    ).rejects.toThrow(
      /binds MCP servers \(tools\), but its runtime AgentRuntime default\/rt does not declare the capability mcp/,
    );
  });

  it("refuses a server that is not there, and one whose secretRef is not offered", async () => {
    await expect(
      mcpGrantsOf(store, agent([{ name: "absent" }]), runtime(["mcp"]), admission, {}),
    ).rejects.toThrow(/MCPServer default\/absent of Agent default\/bob not found/);
    await expect(
      mcpGrantsOf(store, agent([{ name: "tools" }]), runtime(["mcp"]), admission, {}),
    ).rejects.toThrow(/MCP_KEY/);
  });
});
