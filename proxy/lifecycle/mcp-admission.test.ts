import { afterEach, describe, expect, it } from "vitest";
import { startTestServer, type TestServer } from "../testing/test-server.ts";

/** An Agent's MCP servers as a client meets them: provisioned as grants, or refused before anything is. */
const API = "agent-sessions.dev/v1alpha1";
const SECRET = "mcp-literal-credential-42";

let t: TestServer | undefined;
afterEach(async () => {
  await t?.close();
  t = undefined;
});

async function setUp(runtimeRef: string, capabilities: string[]): Promise<TestServer> {
  const server = await startTestServer();
  await server.put(`/v1/namespaces/default/agentruntimes/${runtimeRef}`, {
    apiVersion: API,
    kind: "AgentRuntime",
    metadata: { name: runtimeRef },
    spec: { image: server.server.config.shippedImages.reference, contract: "v1alpha2", capabilities },
  });
  const mcp = await server.put("/v1/namespaces/default/mcpservers/tools", {
    apiVersion: API,
    kind: "MCPServer",
    metadata: { name: "tools" },
    spec: {
      url: "http://10.213.0.1:9000/mcp",
      toolsAllow: ["add", "echo"],
      credentials: [{ name: "t", header: "Authorization", prefix: "Bearer ", value: SECRET }],
    },
  });
  expect(mcp.status, JSON.stringify(mcp.body)).toBe(201);
  const agent = await server.put("/v1/namespaces/default/agents/bob", {
    apiVersion: API,
    kind: "Agent",
    metadata: { name: "bob" },
    spec: { runtimeRef, mcpServers: [{ name: "tools", toolsAllow: ["add", "whoami"], toolsDeny: ["echo"] }] },
  });
  expect(agent.status, JSON.stringify(agent.body)).toBe(201);
  return server;
}

describe("an Agent's MCP servers at provision", () => {
  it("a runtime declaring mcp gets the narrowed grants in the provision command, never in the spec", async () => {
    t = await setUp("withmcp", ["mcp"]);
    const runner = await t.runner();
    const spawned = await t.rpc("SpawnAgent", { agent_ref: "bob", client_request_id: "r1" });
    expect(spawned.status, JSON.stringify(spawned.body)).toBe(200);
    const [provision] = runner.commandsOf("provision");
    expect(provision?.mcp).toEqual([
      {
        name: "tools",
        url: "http://10.213.0.1:9000/mcp",
        allow: ["add"],
        deny: ["echo"],
        headers: { Authorization: `Bearer ${SECRET}` },
        timeout_ms: 60_000,
      },
    ]);
    expect(JSON.stringify(provision?.spec)).not.toContain(SECRET);
  });

  it("a runtime without mcp is refused, saying so, and nothing is provisioned", async () => {
    t = await setUp("nomcp", ["streaming"]);
    const runner = await t.runner();
    const spawned = await t.rpc("SpawnAgent", { agent_ref: "bob", client_request_id: "r1" });
    expect(spawned.status).toBe(412);
    expect(String(spawned.body.message)).toMatch(/does not declare the capability mcp/);
    expect(runner.commandsOf("provision")).toEqual([]);
  });
});
