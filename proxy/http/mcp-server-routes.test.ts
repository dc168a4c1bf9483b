import type { Hono } from "hono";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { MCP_TRANSPORT_INVARIANT } from "../../contracts/mcp.ts";
import { API_VERSION } from "../../contracts/resources.ts";
import { SqliteStore } from "../store/sqlite-store.ts";
import { testApp } from "../testing/test-app.ts";
import { ADMIN_TOKEN } from "../testing/test-server.ts";

// biome-ignore lint/suspicious/noExplicitAny: JSON bodies of many shapes, read by assertions
type Json = any;

const SECRET = "mcp-credential-0123456789";
let store: SqliteStore;
let app: Hono;

beforeEach(() => {
  store = new SqliteStore(":memory:");
  app = testApp(store, undefined, { secretEnv: { MCP_KEY: "from-env" } });
});
afterEach(async () => {
  await store.close();
});

async function call(method: string, path: string, body?: unknown): Promise<{ status: number; body: Json }> {
  const reply = await app.request(path, {
    method,
    headers: { authorization: `Bearer ${ADMIN_TOKEN}`, "content-type": "application/json" },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  return { status: reply.status, body: await reply.json() };
}

const PATH = "/v1/namespaces/default/mcpservers/tools";
const server = (spec: Record<string, unknown>) => ({
  apiVersion: API_VERSION,
  kind: "MCPServer",
  metadata: { name: "tools" },
  spec: {
    url: "http://10.213.0.1:9000/mcp",
    toolsAllow: ["add"],
    credentials: [{ name: "token", header: "Authorization", prefix: "Bearer ", value: SECRET }],
    ...spec,
  },
});

describe("MCPServer resources (/v1/namespaces/{ns}/mcpservers)", () => {
  it("PUT, GET and list never return a credential's value; valueSet keeps it", async () => {
    const created = await call("PUT", PATH, server({}));
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    expect(JSON.stringify(created.body)).not.toContain(SECRET);
    const got = await call("GET", PATH);
    expect(got.body.spec.credentials).toEqual([
      { name: "token", header: "Authorization", prefix: "Bearer ", valueSet: true },
    ]);
    const list = await call("GET", "/v1/namespaces/default/mcpservers");
    expect(list.body.kind).toBe("MCPServerList");
    expect(JSON.stringify(list.body)).not.toContain(SECRET);
    // GET then PUT back: the stored value is kept.
    const again = await call("PUT", PATH, got.body);
    expect(again.status, JSON.stringify(again.body)).toBe(200);
    const stored = (await store.getResource("MCPServer", "default", "tools")) as Json;
    expect(stored.spec.credentials[0].value).toBe(SECRET);
    expect((await call("DELETE", PATH)).status).toBe(200);
    expect((await call("GET", PATH)).status).toBe(404);
  });

  it.each([
    [{ url: undefined, command: "npx", args: ["an-mcp-server"] }],
    [{ transport: "stdio" }],
    [{ transport: "sse" }],
  ])("refuses %j with 400 naming the invariant, storing nothing", async (spec) => {
    const refused = await call("PUT", PATH, server(spec));
    expect(refused.status).toBe(400);
    expect(refused.body.code).toBe("INVALID_ARGUMENT");
    expect(refused.body.message).toContain(MCP_TRANSPORT_INVARIANT);
    expect(await store.getResource("MCPServer", "default", "tools")).toBeUndefined();
  });

  it.each([["http://127.0.0.1:9000/mcp"], ["http://169.254.169.254/mcp"], ["http://localhost:9000/mcp"]])(
    "refuses a URL the gateway may not reach (%s)",
    async (url) => {
      const refused = await call("PUT", PATH, server({ url }));
      expect([400, 412]).toContain(refused.status);
      expect(refused.body.message).toContain("spec.url");
      expect(await store.getResource("MCPServer", "default", "tools")).toBeUndefined();
    },
  );

  it("refuses a secretRef to a variable the server does not offer", async () => {
    const refused = await call(
      "PUT",
      PATH,
      server({ credentials: [{ name: "token", header: "X-Api-Key", secretRef: { env: "NOT_OFFERED" } }] }),
    );
    expect(refused.status).toBe(400);
    expect(refused.body.message).toContain("NOT_OFFERED");
    const ok = await call(
      "PUT",
      PATH,
      server({ credentials: [{ name: "token", header: "X-Api-Key", secretRef: { env: "MCP_KEY" } }] }),
    );
    expect(ok.status, JSON.stringify(ok.body)).toBe(201);
  });
});
