import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { API_VERSION } from "../contracts/resources.ts";
import { ADMIN_TOKEN, startTestServer, type TestServer } from "../proxy/testing/test-server.ts";
import { AgentSessionsClient } from "./client.ts";
import { ClientError } from "./client-error.ts";

let t: TestServer;
let client: AgentSessionsClient;

beforeAll(async () => {
  t = await startTestServer();
  client = new AgentSessionsClient({ baseUrl: t.server.url, token: ADMIN_TOKEN });
});
afterAll(async () => {
  await t.close();
});

async function rejection(promise: Promise<unknown>): Promise<ClientError> {
  try {
    await promise;
  } catch (error) {
    if (error instanceof ClientError) return error;
    throw error;
  }
  throw new Error("expected a ClientError");
}

describe("AgentSessionsClient", () => {
  it("calls RPCs typed from the contracts", async () => {
    const status = await client.rpc("GetAgentStatus", {});
    expect(status.sessions).toEqual([]);
  });

  it("creates without replacing: create() of an existing name is ALREADY_EXISTS and keeps the stored one", async () => {
    const manifest = (name: string) =>
      ({
        apiVersion: API_VERSION,
        kind: "Agent",
        metadata: { name: "carol" },
        spec: { runtimeRef: "reference", model: { baseUrl: "http://10.0.0.1/v1", name } },
      }) as const;
    expect((await client.create("agents", manifest("first"))).metadata.name).toBe("carol");
    const error = await rejection(client.create("agents", manifest("second")));
    expect(error.code).toBe("ALREADY_EXISTS");
    expect((await client.get("agents", "default", "carol")).spec.model?.name).toBe("first");
    await client.delete("agents", "default", "carol");
  });

  it("puts, gets, lists and deletes resources", async () => {
    const manifest = {
      apiVersion: API_VERSION,
      kind: "Agent",
      metadata: { name: "bob" },
      spec: { runtimeRef: "reference" },
    } as const;
    const created = await client.put("agents", manifest);
    expect(created.created).toBe(true);
    expect((await client.put("agents", manifest)).created).toBe(false);
    expect((await client.get("agents", "default", "bob")).spec.runtimeRef).toBe("reference");
    const list = await client.list("agents", "default");
    expect(list.kind).toBe("AgentList");
    expect(list.items.map((a) => a.metadata.name)).toContain("bob");
    expect((await client.delete("agents", "default", "bob")).metadata.name).toBe("bob");
    // One runtime by name, beside the HarnessSession routes (a router regression once).
    expect((await client.get("agentruntimes", "default", "reference")).kind).toBe("AgentRuntime");
  });

  it("throws ClientError carrying the gRPC code, status and details", async () => {
    const missing = await rejection(client.get("agents", "default", "nobody"));
    expect(missing).toMatchObject({ code: "NOT_FOUND", status: 404 });
    const invalid = await rejection(client.rpc("StopAgentSession", { session_id: "bad id" }));
    expect(invalid.code).toBe("INVALID_ARGUMENT");
    expect(invalid.details?.field_violations).toEqual([expect.objectContaining({ field: "session_id" })]);
    const anonymous = new AgentSessionsClient({ baseUrl: t.server.url });
    expect((await rejection(anonymous.rpc("GetAgentStatus", {}))).code).toBe("UNAUTHENTICATED");
  });

  it("says UNAVAILABLE, without a status, when the server cannot be reached", async () => {
    const nowhere = new AgentSessionsClient({ baseUrl: "http://127.0.0.1:9", token: ADMIN_TOKEN });
    const error = await rejection(nowhere.rpc("GetAgentStatus", {}));
    expect(error).toMatchObject({ code: "UNAVAILABLE", status: undefined });
    expect(error.message).toContain("cannot reach http://127.0.0.1:9");
  });

  it("follows the event stream", async () => {
    const runner = await t.runner();
    const abort = new AbortController();
    const seen: string[] = [];
    const following = (async () => {
      for await (const event of client.events({ signal: abort.signal })) {
        if (event.kind !== "frame") continue;
        seen.push(String(event.frame.payload.state));
        if (event.frame.payload.state === "READY") abort.abort();
      }
    })();
    // The stream starts with the next frame: wait until it is open before causing frames.
    await new Promise((r) => setTimeout(r, 200));
    await client.rpc("SpawnAgent", { agent_ref: "alice", client_request_id: "events-1" });
    await following;
    expect(seen).toEqual(["STARTING", "READY"]);
    runner.kill();
  });

  it("reconnects a dropped event stream with Last-Event-ID", async () => {
    const frame = (seq: number) =>
      `id: ${seq}\ndata: ${JSON.stringify({ protocol: "compass.v1", seq, session_id: "s", type: "log", ts: "2026-01-01T00:00:00.000Z", payload: {} })}\n\n`;
    const cursors: (string | null)[] = [];
    const fakeFetch = (async (_url: string, init: RequestInit) => {
      const headers = new Headers(init.headers);
      cursors.push(headers.get("last-event-id"));
      const body = cursors.length === 1 ? `${frame(1)}: keepalive\n\n${frame(2)}` : frame(3);
      return new Response(body, { headers: { "content-type": "text/event-stream" } });
    }) as typeof fetch;
    const fake = new AgentSessionsClient({ baseUrl: "http://fake", token: "t", fetch: fakeFetch });
    const abort = new AbortController();
    const ids: string[] = [];
    const seen: string[] = [];
    const events = fake.events({
      signal: abort.signal,
      reconnectDelayMs: 1,
      onOpen: () => seen.push("open"),
      onReconnect: () => seen.push("reconnect"),
    });
    for await (const event of events) {
      if (event.kind === "frame") ids.push(event.id);
      if (event.kind === "frame") seen.push(event.id);
      if (ids.length === 3) abort.abort();
    }
    expect(ids).toEqual(["1", "2", "3"]);
    expect(cursors).toEqual([null, "2"]);
    // Told when the stream is open, before its frames: a page shows "live" then.
    expect(seen).toEqual(["open", "1", "2", "reconnect", "open", "3"]);
  });

  it("says who the token is", async () => {
    expect(await client.whoami()).toMatchObject({ scopes: ["admin"] });
  });

  it("calls fetch without a receiver, as a browser's window.fetch requires", async () => {
    // A browser's fetch throws "Illegal invocation" when called as a method of another object.
    const receivers: unknown[] = [];
    const strictFetch = function (this: unknown) {
      receivers.push(this);
      return Promise.resolve(Response.json({ name: "admin", id: "admin", scopes: ["admin"] }));
    } as unknown as typeof fetch;
    const browserLike = new AgentSessionsClient({ baseUrl: "http://fake", token: "t", fetch: strictFetch });
    expect((await browserLike.whoami()).name).toBe("admin");
    expect(receivers).toEqual([undefined]);
  });
});
