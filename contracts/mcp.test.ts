import { describe, expect, it } from "vitest";
import { effectiveTools, MCP_TRANSPORT_INVARIANT, MCPServer, MCPServerWrite, toolAllowed } from "./mcp.ts";
import { AgentSpec } from "./resources.ts";

const server = (spec: Record<string, unknown>) => ({
  apiVersion: "agent-sessions.dev/v1alpha1",
  kind: "MCPServer",
  metadata: { name: "tools" },
  spec,
});

describe("MCPServer", () => {
  it("takes a Streamable HTTP URL, tool lists, header credentials and a timeout", () => {
    const parsed = MCPServer.parse(
      server({
        url: "http://10.213.0.1:9000/mcp",
        transport: "streamable-http",
        toolsAllow: ["add"],
        toolsDeny: ["rm"],
        credentials: [{ name: "token", header: "Authorization", prefix: "Bearer ", value: "s3cret" }],
        timeout: "30s",
      }),
    );
    expect(parsed.spec.toolsDeny).toEqual(["rm"]);
  });

  it.each([
    [{ command: "npx", args: ["some-mcp-server"] }, "command"],
    [{ url: "http://10.213.0.1:9000/mcp", transport: "stdio" }, "transport"],
    [{ url: "http://10.213.0.1:9000/sse", transport: "sse" }, "transport"],
  ])("refuses %j naming the invariant", (spec, field) => {
    const result = MCPServer.safeParse(server(spec));
    expect(result.success).toBe(false);
    const issue = result.error?.issues[0];
    expect(issue?.path).toEqual(["spec", field]);
    expect(issue?.message).toContain(MCP_TRANSPORT_INVARIANT);
  });

  it.each([
    [{}, "url"],
    [{ url: "file:///etc/passwd" }, "url"],
    [{ url: "http://h/mcp", toolsAllow: ["bad name"] }, "toolsAllow"],
    [{ url: "http://h/mcp", toolsDeny: Array.from({ length: 300 }, (_, i) => `t${i}`) }, "toolsDeny"],
    [{ url: "http://h/mcp", timeout: "1h" }, "timeout"],
    [{ url: "http://h/mcp", timeout: "10ms" }, "timeout"],
    [
      { url: "http://h/mcp", credentials: [{ name: "a", header: "Mcp-Session-Id", value: "x" }] },
      "credentials",
    ],
    [{ url: "http://h/mcp", credentials: [{ name: "a", header: "X-Key" }] }, "credentials"],
  ])("refuses bad input %j at %s", (spec, field) => {
    const result = MCPServer.safeParse(server(spec));
    expect(result.success).toBe(false);
    expect(result.error?.issues[0]?.path[1]).toBe(field);
  });

  it("takes valueSet back on PUT, never on the stored form", () => {
    const written = server({
      url: "http://h/mcp",
      credentials: [{ name: "a", header: "X-Key", valueSet: true }],
    });
    expect(MCPServerWrite.safeParse(written).success).toBe(true);
    expect(MCPServer.safeParse(written).success).toBe(false);
  });
});

describe("an Agent's MCP servers narrow, never widen", () => {
  it("allow is the intersection, deny the union", () => {
    const tools = effectiveTools(
      { toolsAllow: ["add", "echo", "rm"], toolsDeny: ["rm"] },
      { toolsAllow: ["echo", "rm", "extra"], toolsDeny: ["add"] },
    );
    expect(tools).toEqual({ allow: ["echo"], deny: ["add", "rm"] });
    expect(toolAllowed(tools, "echo")).toBe(true);
    expect(toolAllowed(tools, "extra")).toBe(false);
    expect(toolAllowed(tools, "rm")).toBe(false);
  });

  it("an Agent cannot widen a server's list by naming other tools", () => {
    const tools = effectiveTools({ toolsAllow: ["add"], toolsDeny: [] }, { toolsAllow: ["whoami"] });
    expect(tools.allow).toEqual([]);
    expect(toolAllowed(tools, "whoami")).toBe(false);
  });

  it("no allow list on either: every tool but the denied", () => {
    const tools = effectiveTools({ toolsDeny: ["rm"] }, {});
    expect(tools.allow).toBeUndefined();
    expect(toolAllowed(tools, "anything")).toBe(true);
    expect(toolAllowed(tools, "rm")).toBe(false);
  });

  it("an Agent names each server once", () => {
    const spec = { runtimeRef: "compass", mcpServers: [{ name: "a" }, { name: "a" }] };
    expect(AgentSpec.safeParse(spec).success).toBe(false);
    expect(AgentSpec.safeParse({ ...spec, mcpServers: [{ name: "a", toolsAllow: ["x"] }] }).success).toBe(
      true,
    );
  });
});
