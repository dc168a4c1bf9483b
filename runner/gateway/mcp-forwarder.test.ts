import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { MCP_TOKEN_ENV, type McpServerGrant } from "../../contracts/mcp.ts";
import { type McpFixture, startMcpFixture } from "../../test/fixtures/mcp-server.ts";
import { type Gateway, startGateway } from "./gateway.ts";
import { MCP_ANSWER_MAX_BYTES, type McpToolCallReport } from "./mcp-forwarder.ts";
import { GatewayRoutes } from "./routes.ts";

const SECRET = "mcp-secret-value-123";

describe("the gateway's MCP path (a real MCP server built with the official SDK)", () => {
  let fixture: McpFixture;
  let gateway: Gateway;
  let token: string;
  const calls: McpToolCallReport[] = [];
  const routes = new GatewayRoutes();

  beforeAll(async () => {
    fixture = await startMcpFixture();
    const grant: McpServerGrant = {
      name: "tools",
      url: fixture.url,
      allow: ["add", "echo"],
      deny: ["delete_everything"],
      headers: { Authorization: `Bearer ${SECRET}` },
      timeout_ms: 5_000,
    };
    const route = routes.ensure("ws-1", undefined, {}, [grant]);
    token = route.tokens[MCP_TOKEN_ENV] ?? "";
    gateway = await startGateway({
      host: "127.0.0.1",
      port: 0,
      routes,
      events: {
        onUsage: () => undefined,
        onRefused: () => undefined,
        onToolCall: (_r, call) => calls.push(call),
      },
    });
  });

  afterAll(async () => {
    await gateway?.close();
    await fixture?.close();
  });

  async function client(presented = token): Promise<Client> {
    const c = new Client({ name: "test", version: "1.0.0" });
    await c.connect(
      new StreamableHTTPClientTransport(new URL(gateway.mcpUrlFor("tools")), {
        requestInit: { headers: { authorization: `Bearer ${presented}` } },
      }),
    );
    return c;
  }

  it("lists only the tools the session may call", async () => {
    const c = await client();
    const listed = await c.listTools();
    expect(listed.tools.map((t) => t.name).sort()).toEqual(["add", "echo"]);
    await c.close();
  });

  it("forwards an allowed call with the server's credential put in, and reports it", async () => {
    const c = await client();
    const result = await c.callTool({ name: "add", arguments: { a: 2, b: 3 } });
    expect(result.content).toEqual([{ type: "text", text: "sum=5" }]);
    const seen = fixture.toolCalls().find((call) => call.tool === "add");
    expect(seen?.authorization).toBe(`Bearer ${SECRET}`);
    // The session's token never reaches the server.
    expect(fixture.log.every((entry) => !entry.authorization.includes(token))).toBe(true);
    expect(calls.find((call) => call.tool === "add")).toMatchObject({ server: "tools", outcome: "ok" });
    await c.close();
  });

  it("refuses a denied tool before it reaches the server, with a clear JSON-RPC error", async () => {
    const c = await client();
    const before = fixture.log.length;
    await expect(c.callTool({ name: "delete_everything", arguments: {} })).rejects.toThrow(
      /tool "delete_everything" is not allowed for this session on MCP server "tools"/,
    );
    // A tool outside toolsAllow is refused alike.
    await expect(c.callTool({ name: "whoami", arguments: {} })).rejects.toThrow(/not allowed/);
    expect(fixture.log.length).toBe(before);
    expect(
      fixture.toolCalls().some((call) => call.tool === "delete_everything" || call.tool === "whoami"),
    ).toBe(false);
    expect(calls.filter((call) => call.outcome === "refused").map((call) => call.tool)).toEqual([
      "delete_everything",
      "whoami",
    ]);
    await c.close();
  });

  it("refuses a call without the session's token, and a server that is not the session's", async () => {
    const none = await fetch(gateway.mcpUrlFor("tools"), { method: "POST", body: "{}" });
    expect(none.status).toBe(401);
    const other = await fetch(gateway.mcpUrlFor("elsewhere"), {
      method: "POST",
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
      body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/list" }),
    });
    expect(other.status).toBe(404);
    const body = (await other.json()) as { error: { message: string } };
    expect(body.error.message).toContain('MCP server "elsewhere" is not one of this session\'s');
  });

  it("refuses batches and bodies that are not JSON-RPC", async () => {
    const post = (body: string) =>
      fetch(gateway.mcpUrlFor("tools"), {
        method: "POST",
        headers: {
          authorization: `Bearer ${token}`,
          "content-type": "application/json",
          accept: "application/json, text/event-stream",
        },
        body,
      });
    const batch = await post(
      JSON.stringify([
        { jsonrpc: "2.0", id: 1, method: "tools/call", params: { name: "delete_everything" } },
      ]),
    );
    expect(batch.status).toBe(400);
    expect(await batch.text()).toContain("batches are not forwarded");
    expect((await post("not json")).status).toBe(400);
    expect(fixture.toolCalls().some((call) => call.tool === "delete_everything")).toBe(false);
  });

  it("refuses a token once its workspace is suspended (its MCP credentials forgotten)", async () => {
    routes.suspend("ws-1");
    const res = await fetch(gateway.mcpUrlFor("tools"), {
      method: "POST",
      headers: { authorization: `Bearer ${token}` },
      body: "{}",
    });
    expect(res.status).toBe(401);
    expect(routes.get("ws-1")?.mcp).toBeUndefined();
  });
});

describe("the gateway's bounds on an MCP call", () => {
  let gateway: Gateway;
  let token: string;
  const calls: McpToolCallReport[] = [];
  let upstream: import("node:http").Server;
  const held: import("node:http").ServerResponse[] = [];

  beforeAll(async () => {
    const { createServer } = await import("node:http");
    // A server that never answers a call of `slow`, and answers `huge` with more than the bound.
    upstream = createServer(async (req, res) => {
      const pieces: Buffer[] = [];
      for await (const piece of req) pieces.push(piece as Buffer);
      const body = JSON.parse(Buffer.concat(pieces).toString("utf8")) as {
        id: number;
        params?: { name?: string };
      };
      if (body.params?.name === "slow") return void held.push(res);
      const text = "x".repeat(MCP_ANSWER_MAX_BYTES + 1024);
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify({ jsonrpc: "2.0", id: body.id, result: { content: [{ type: "text", text }] } }));
    });
    await new Promise<void>((resolve) => upstream.listen(0, "127.0.0.1", resolve));
    const port = (upstream.address() as import("node:net").AddressInfo).port;
    const routes = new GatewayRoutes();
    const route = routes.ensure("ws-2", undefined, {}, [
      { name: "bounded", url: `http://127.0.0.1:${port}/mcp`, deny: [], headers: {}, timeout_ms: 1_000 },
    ]);
    token = route.tokens[MCP_TOKEN_ENV] ?? "";
    gateway = await startGateway({
      host: "127.0.0.1",
      port: 0,
      routes,
      events: {
        onUsage: () => undefined,
        onRefused: () => undefined,
        onToolCall: (_r, call) => calls.push(call),
      },
    });
  });

  afterAll(async () => {
    for (const res of held) res.destroy();
    await gateway?.close();
    await new Promise<void>((resolve) => upstream?.close(() => resolve()));
  });

  const call = (tool: string) =>
    fetch(gateway.mcpUrlFor("bounded"), {
      method: "POST",
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
      body: JSON.stringify({
        jsonrpc: "2.0",
        id: 7,
        method: "tools/call",
        params: { name: tool, arguments: {} },
      }),
    });

  it("a call past the server's timeout ends with 504 and a JSON-RPC error, reported as timeout", async () => {
    const res = await call("slow");
    expect(res.status).toBe(504);
    const body = (await res.json()) as { id: number; error: { message: string } };
    expect(body.id).toBe(7);
    expect(body.error.message).toContain('MCP server "bounded" did not answer within 1 s');
    expect(calls.find((c) => c.tool === "slow")?.outcome).toBe("timeout");
  });

  it("an answer past the size bound is cut, reported as an error", async () => {
    const res = await call("huge");
    expect(res.status).toBe(502);
    expect(((await res.json()) as { error: { message: string } }).error.message).toContain("was cut off");
    expect(calls.find((c) => c.tool === "huge")?.outcome).toBe("error");
  });
});
