import { describe, expect, it } from "vitest";
import type { Agent } from "../contracts/resources.ts";
import { redactedMcpServer } from "../contracts/mcp.ts";
import { age, describeResource, resourceTable, table } from "./render.ts";

describe("render", () => {
  it("pads table columns to the widest cell", () => {
    expect(
      table(
        ["NAME", "PHASE"],
        [
          ["a", "Ready"],
          ["longer-name", "Stopped"],
        ],
      ),
    ).toBe("NAME          PHASE\na             Ready\nlonger-name   Stopped");
  });

  it("says ages like kubectl", () => {
    const now = Date.parse("2026-01-02T00:00:00Z");
    expect(age("2026-01-01T23:59:30Z", now)).toBe("30s");
    expect(age("2026-01-01T23:00:00Z", now)).toBe("60m");
    expect(age("2026-01-01T00:00:00Z", now)).toBe("24h");
    expect(age(undefined, now)).toBe("<none>");
  });

  it("describe never prints a literal credential value", () => {
    const agent: Agent = {
      apiVersion: "agent-sessions.dev/v1alpha1",
      kind: "Agent",
      metadata: { name: "a", namespace: "default" },
      spec: {
        runtimeRef: "reference",
        credentials: [
          { name: "OPENAI_API_KEY", value: "sk-very-secret" },
          { name: "OTHER", secretRef: { env: "SERVER_ENV" } },
        ],
        egress: [],
      },
    };
    const text = describeResource("Agent", agent);
    expect(text).not.toContain("sk-very-secret");
    expect(text).toContain("value: (literal, hidden)");
    expect(text).toContain("env: SERVER_ENV");
  });

  it("get mcpservers shows the URL, the tool lists and how many credentials, never a value", () => {
    const server = redactedMcpServer({
      apiVersion: "agent-sessions.dev/v1alpha1",
      kind: "MCPServer",
      metadata: { name: "tools", namespace: "default" },
      spec: {
        url: "http://10.0.0.1:9000/mcp",
        toolsAllow: ["add", "echo"],
        toolsDeny: ["rm"],
        credentials: [{ name: "t", header: "Authorization", value: "very-secret" }],
      },
    });
    const text = resourceTable("mcpservers", [server]);
    expect(text).toMatch(/^NAME\s+URL\s+ALLOW\s+DENY\s+CREDENTIALS\s+TIMEOUT\s+AGE/);
    expect(text).toMatch(/tools\s+http:\/\/10\.0\.0\.1:9000\/mcp\s+add,echo\s+rm\s+1\s+60s/);
    expect(text).not.toContain("very-secret");
    expect(describeResource("MCPServer", server)).not.toContain("very-secret");
  });
});
