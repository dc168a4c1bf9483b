import { afterEach, describe, expect, it, vi } from "vitest";
import { SqliteStore } from "../store/sqlite-store.ts";
import { noRunners, testApp } from "../testing/test-app.ts";
import { SseClient } from "../testing/sse-client.ts";
import { ADMIN_TOKEN, startTestServer, type TestServer } from "../testing/test-server.ts";

function appWith(store: SqliteStore, jsonBodyMaxBytes: number) {
  return testApp(store, noRunners, { jsonBodyMaxBytes });
}

const headers = { authorization: `Bearer ${ADMIN_TOKEN}`, "content-type": "application/json" };
const bigAgent = (padding: number) =>
  JSON.stringify({
    apiVersion: "agent-sessions.dev/v1alpha1",
    kind: "Agent",
    metadata: { name: "big" },
    spec: { runtimeRef: "reference", model: { baseUrl: "http://10.0.0.1/v1", name: "x".repeat(padding) } },
  });

describe("body limits on the JSON routes", () => {
  let store: SqliteStore | undefined;
  afterEach(async () => {
    await store?.close();
  });

  it("refuses a PUT, PATCH or RPC body over the limit with 413 RESOURCE_EXHAUSTED and stores nothing", async () => {
    store = new SqliteStore(":memory:");
    const app = appWith(store, 1024);
    for (const [method, path] of [
      ["PUT", "/v1/namespaces/default/agents/big"],
      ["PATCH", "/v1/namespaces/default/harnesssessions/big"],
      ["POST", "/v1/rpc/SpawnAgent"],
      ["POST", "/v1/namespaces/default/agentruns"],
    ] as const) {
      const response = await app.request(path, { method, headers, body: bigAgent(2048) });
      expect(response.status, `${method} ${path}`).toBe(413);
      expect(await response.json()).toMatchObject({
        code: "RESOURCE_EXHAUSTED",
        message: "the request body exceeds 1024 bytes",
      });
    }
    expect(await store.listResources("Agent", "default")).toEqual([]);
    const small = await app.request("/v1/namespaces/default/agents/big", {
      method: "PUT",
      headers,
      body: bigAgent(10),
    });
    expect(small.status).toBe(201);
  });

  it("counts the bytes of a body sent without content-length (chunked)", async () => {
    store = new SqliteStore(":memory:");
    const app = appWith(store, 1024);
    const text = bigAgent(4096);
    const body = new ReadableStream<Uint8Array>({
      start(controller) {
        for (let i = 0; i < text.length; i += 512)
          controller.enqueue(new TextEncoder().encode(text.slice(i, i + 512)));
        controller.close();
      },
    });
    const response = await app.request("/v1/namespaces/default/agents/big", {
      method: "PUT",
      headers,
      body,
      duplex: "half",
    } as RequestInit);
    expect(response.status).toBe(413);
  });

  it("leaves the proxied requests to the relay's own limit", async () => {
    store = new SqliteStore(":memory:");
    const app = appWith(store, 1024);
    const response = await app.request("/v1/namespaces/default/harnesssessions/s/requests", {
      method: "POST",
      headers,
      body: JSON.stringify({ input: "x".repeat(4096) }),
    });
    // No harness routes in this app: not found, but not cut off by the JSON limit.
    expect(response.status).toBe(404);
  });
});

describe("the /v1/events subscriber cap", () => {
  let t: TestServer | undefined;
  afterEach(async () => {
    await t?.close();
    t = undefined;
  });

  it("answers an API token 429 RESOURCE_EXHAUSTED beyond the cap and serves again once a stream closes", async () => {
    t = await startTestServer({ maxEventSubscribers: 2 });
    const server = t;
    // The cap bounds API tokens' streams (an admin's are not counted: caller-bounds.ts).
    const minted = await server.call("POST", "/v1/tokens", {
      name: "viewer",
      scopes: ["namespace:default:view"],
    });
    const open = () =>
      SseClient.open(`${server.server.url}/v1/events`, { authorization: `Bearer ${minted.body.token}` });
    const first = await open();
    const second = await open();
    expect([first.status, second.status]).toEqual([200, 200]);
    const refused = await open();
    expect(refused.status).toBe(429);
    expect(JSON.parse(refused.events[0]?.data ?? "{}")).toMatchObject({ code: "RESOURCE_EXHAUSTED" });
    first.close();
    await vi.waitFor(
      async () => {
        const again = await open();
        expect(again.status).toBe(200);
        again.close();
      },
      { timeout: 5_000, interval: 50 },
    );
  });
});
