import { afterEach, beforeEach, describe, expect, it } from "vitest";
import type { RunnerCommand } from "../../contracts/runner-protocol.ts";
import type { buildApp } from "./app.ts";
import type { RpcHandlers } from "../lifecycle/lifecycle.ts";
import type { RunnerDirectory } from "../lifecycle/runner-directory.ts";
import { SqliteStore } from "../store/sqlite-store.ts";
import { testApp } from "../testing/test-app.ts";
import { ADMIN_TOKEN, RUNNER_TOKEN, TEST_IMAGE } from "../testing/test-server.ts";

let store: SqliteStore;
let commands: RunnerCommand[];
let app: ReturnType<typeof buildApp>;

/** A runner directory with one connected runner that records commands and says yes. */
function recordingRunners(): RunnerDirectory {
  const runner = {
    runner_id: "runner-1",
    runner_name: "r",
    engine: "docker" as const,
    capacity: 10,
    labels: {},
    draining: false,
    last_seen_at: "",
  };
  return {
    connectedRunners: () => [runner],
    isConnected: () => true,
    command: async (_id, command) => {
      commands.push(command);
      return { ok: true, result: { container_name: "x", state: "READY", removed: true } } as never;
    },
  };
}

function build(rpc?: RpcHandlers) {
  return testApp(store, recordingRunners(), rpc ? { rpc } : {});
}

beforeEach(() => {
  store = new SqliteStore(":memory:");
  commands = [];
  app = build();
});
afterEach(async () => {
  await store.close();
});

const auth = (token = ADMIN_TOKEN) => ({ authorization: `Bearer ${token}` });
const post = (path: string, body: string | object, token?: string) =>
  app.request(path, {
    method: "POST",
    headers: { ...auth(token), "content-type": "application/json" },
    body: typeof body === "string" ? body : JSON.stringify(body),
  });
const put = (path: string, body: object) =>
  app.request(path, { method: "PUT", headers: auth(), body: JSON.stringify(body) });

async function nothingStored(): Promise<void> {
  expect(commands).toEqual([]);
  expect(await store.listWorkspaces()).toEqual([]);
  expect(await store.listSessions()).toEqual([]);
}

describe("probes", () => {
  it("answers /healthz and /readyz without a token; /readyz is 503 once the store is closed", async () => {
    expect((await app.request("/healthz")).status).toBe(200);
    expect((await app.request("/readyz")).status).toBe(200);
    await store.close();
    const closed = await app.request("/readyz");
    expect(closed.status).toBe(503);
    expect(await closed.json()).toMatchObject({ code: "UNAVAILABLE" });
  });
});

describe("authentication", () => {
  it("requires the admin bearer token on /v1 (401 with WWW-Authenticate)", async () => {
    const none = await app.request("/v1/rpc/GetAgentStatus", { method: "POST" });
    expect(none.status).toBe(401);
    expect(none.headers.get("www-authenticate")).toContain("Bearer");
    expect(await none.json()).toMatchObject({ code: "UNAUTHENTICATED" });
    expect((await post("/v1/rpc/GetAgentStatus", {}, "wrong-token-0123456789")).status).toBe(401);
  });

  it("refuses the runner token on the client API with 403 PERMISSION_DENIED", async () => {
    for (const path of ["/v1/rpc/GetAgentStatus", "/v1/rpc/SpawnAgent"]) {
      const reply = await post(path, { agent_ref: "alice", client_request_id: "x" }, RUNNER_TOKEN);
      expect(reply.status).toBe(403);
      expect(await reply.json()).toEqual({
        code: "PERMISSION_DENIED",
        message: "a runner token cannot call the client API",
      });
    }
    expect((await app.request("/v1/events", { headers: auth(RUNNER_TOKEN) })).status).toBe(403);
    expect((await app.request("/v1/namespaces/default/agents", { headers: auth(RUNNER_TOKEN) })).status).toBe(
      403,
    );
    await nothingStored();
  });
});

describe("POST /v1/rpc/{Method}", () => {
  it("answers an unknown method with 404 NOT_FOUND", async () => {
    const reply = await post("/v1/rpc/DeleteEverything", {});
    expect(reply.status).toBe(404);
    expect(await reply.json()).toMatchObject({ code: "NOT_FOUND" });
  });

  it("answers a body that is not JSON with 400 INVALID_ARGUMENT", async () => {
    const reply = await post("/v1/rpc/StartAgentSession", "{not json");
    expect(reply.status).toBe(400);
    expect(await reply.json()).toEqual({
      code: "INVALID_ARGUMENT",
      message: "the request body is not valid JSON",
    });
    await nothingStored();
  });

  it.each([
    ["ProvisionAgentWorkspace", { agent_ref: "Alice!", client_request_id: "r" }, "agent_ref"],
    ["ProvisionAgentWorkspace", { agent_ref: "alice", client_request_id: "a b" }, "client_request_id"],
    [
      "ProvisionAgentWorkspace",
      { agent_ref: "alice", client_request_id: "r", workstream: "UPPER" },
      "workstream",
    ],
    ["ProvisionAgentWorkspace", { agent_ref: "alice", client_request_id: "r", color: "red" }, "color"],
    ["StartAgentSession", {}, "container_name"],
    ["StartAgentSession", { container_name: "c", resume_session_id: "has space" }, "resume_session_id"],
    ["StopAgentSession", { session_id: 42 }, "session_id"],
    ["ReloadAgentSession", {}, "session_id"],
    ["GetAgentStatus", { session_id: "" }, "session_id"],
    ["SpawnAgent", { agent_ref: "a/b/c", client_request_id: "r" }, "agent_ref"],
    ["RemoveAgentWorkspace", { container_name: "" }, "container_name"],
    ["RemoveAgentWorkspace", [], "(body)"],
  ])("%s rejects %j with 400 naming %s, and changes nothing", async (method, body, field) => {
    const reply = await post(`/v1/rpc/${method}`, body);
    expect(reply.status).toBe(400);
    const error = (await reply.json()) as {
      code: string;
      message: string;
      details: { field_violations: { field: string }[] };
    };
    expect(error.code).toBe("INVALID_ARGUMENT");
    expect(error.message).toContain(field);
    expect(error.details.field_violations.map((v) => v.field)).toContain(field);
    // zod's developer wording ("Invalid input: expected …") never reaches a person.
    expect(error.message).not.toMatch(/Invalid input|received undefined/);
    await nothingStored();
  });

  it("sends a browser opening the server's address to the UI", async () => {
    const reply = await app.request("/");
    expect(reply.status).toBe(302);
    expect(reply.headers.get("location")).toBe("/ui");
  });

  it("renders an unexpected failure as 500 INTERNAL without its text", async () => {
    const failing = build({
      ...({} as RpcHandlers),
      GetAgentStatus: async () => {
        throw new Error("secret engine stderr");
      },
    });
    const reply = await failing.request("/v1/rpc/GetAgentStatus", {
      method: "POST",
      headers: auth(),
      body: "{}",
    });
    expect(reply.status).toBe(500);
    expect(await reply.json()).toEqual({ code: "INTERNAL", message: "internal error" });
  });

  it("treats an empty body as {}", async () => {
    const reply = await app.request("/v1/rpc/GetAgentStatus", { method: "POST", headers: auth() });
    expect(reply.status).toBe(200);
    expect(await reply.json()).toEqual({ sessions: [] });
  });
});

describe("response headers", () => {
  it.each([
    ["GET", "/v1/namespaces/default/agents", auth()],
    ["GET", "/v1/namespaces/default/agents", {}],
    ["GET", "/v1/no-such-route", auth()],
    ["POST", "/v1/rpc/GetAgentStatus", auth()],
    ["GET", "/openapi.json", {}],
    ["GET", "/healthz", {}],
  ])("%s %s answers nosniff, no-store and a CSP that runs nothing", async (method, path, headers) => {
    const reply = await app.request(path, {
      method,
      headers,
      ...(method === "POST" ? { body: "{}" } : {}),
    });
    expect(reply.headers.get("x-content-type-options")).toBe("nosniff");
    expect(reply.headers.get("cache-control")).toBe("no-store");
    expect(reply.headers.get("content-security-policy")).toBe("default-src 'none'; frame-ancestors 'none'");
  });

  it("leaves the UI's own policy as it is", async () => {
    const reply = await app.request("/ui");
    expect(reply.headers.get("content-security-policy")).toContain("default-src 'self'");
    expect(reply.headers.get("cache-control")).toBe("no-cache");
    expect(reply.headers.get("x-content-type-options")).toBe("nosniff");
  });
});

describe("field errors name where the value came from", () => {
  it.each([
    ["path", "namespace", "/v1/namespaces/Not_A_Label/agents", {}],
    ["query", "limit", "/v1/namespaces/default/agents?limit=abc", {}],
    ["header", "Last-Event-ID", "/v1/events", { "last-event-id": "not-a-cursor" }],
    ["query", "last_event_id", "/v1/events?last_event_id=not-a-cursor", {}],
  ])(
    "a bad value in the %s (%s) is labelled with where it came from, never (body)",
    async (where, name, path, headers) => {
      const reply = await app.request(path, { headers: { ...auth(), ...headers } });
      expect(reply.status).toBe(400);
      const error = (await reply.json()) as {
        code: string;
        message: string;
        details: { field_violations: { field: string; location?: string }[] };
      };
      expect(error.code).toBe("INVALID_ARGUMENT");
      expect(error.message).toContain(`${name} (${where})`);
      expect(error.message).not.toContain("(body)");
      expect(error.details.field_violations).toEqual([
        expect.objectContaining({ field: name, location: where }),
      ]);
    },
  );
});

describe("/v1/namespaces/{ns}/agentruntimes and agents", () => {
  const runtime = {
    apiVersion: "agent-sessions.dev/v1alpha1",
    kind: "AgentRuntime",
    metadata: { name: "custom" },
    spec: { image: TEST_IMAGE, contract: "v1alpha2", capabilities: ["streaming"], approved: true },
  };

  it("creates (201), replaces (200), reads, lists and deletes", async () => {
    const created = await put("/v1/namespaces/team-a/agentruntimes/custom", runtime);
    expect(created.status).toBe(201);
    const body = (await created.json()) as { metadata: Record<string, unknown> };
    expect(body.metadata).toMatchObject({ name: "custom", namespace: "team-a" });
    expect(body.metadata.creationTimestamp).toBeTypeOf("string");
    const replaced = await put("/v1/namespaces/team-a/agentruntimes/custom", {
      ...runtime,
      spec: { ...runtime.spec, approved: false },
    });
    expect(replaced.status).toBe(200);
    const read = await app.request("/v1/namespaces/team-a/agentruntimes/custom", { headers: auth() });
    // A writer's `approved` is not stored: approval is the operator's (its image's registry is).
    const readBody = (await read.json()) as { spec: Record<string, unknown> };
    expect(readBody).toMatchObject({ status: { approved: true }, metadata: body.metadata });
    expect(readBody.spec).not.toHaveProperty("approved");
    const list = await app.request("/v1/namespaces/team-a/agentruntimes", { headers: auth() });
    expect(await list.json()).toMatchObject({
      kind: "AgentRuntimeList",
      items: [{ metadata: { name: "custom" } }],
    });
    expect(
      (await app.request("/v1/namespaces/team-a/agentruntimes/custom", { method: "DELETE", headers: auth() }))
        .status,
    ).toBe(200);
    expect(
      (await app.request("/v1/namespaces/team-a/agentruntimes/custom", { headers: auth() })).status,
    ).toBe(404);
  });

  it("rejects a tag instead of a digest, naming spec.image, and stores nothing", async () => {
    const reply = await put("/v1/namespaces/default/agentruntimes/custom", {
      ...runtime,
      spec: { ...runtime.spec, image: "nginx:latest" },
    });
    expect(reply.status).toBe(400);
    expect(((await reply.json()) as { message: string }).message).toContain("spec.image");
    expect(await store.listResources("AgentRuntime", "default")).toEqual([]);
  });

  it("rejects a manifest whose metadata contradicts the path, and a credential with both value and secretRef", async () => {
    expect((await put("/v1/namespaces/default/agentruntimes/other", runtime)).status).toBe(400);
    const agent = await put("/v1/namespaces/default/agents/a", {
      apiVersion: "agent-sessions.dev/v1alpha1",
      kind: "Agent",
      spec: { runtimeRef: "custom", credentials: [{ name: "KEY", value: "v", secretRef: { env: "KEY" } }] },
    });
    expect(agent.status).toBe(400);
    expect(((await agent.json()) as { message: string }).message).toContain("spec.credentials.0");
  });

  it("creates only with If-None-Match: *: an existing name is 409 ALREADY_EXISTS and the stored one is kept", async () => {
    const agent = (model: string) => ({
      apiVersion: "agent-sessions.dev/v1alpha1",
      kind: "Agent",
      metadata: { name: "once" },
      spec: { runtimeRef: "reference", model: { baseUrl: "http://10.0.0.1/v1", name: model } },
    });
    const create = (body: object) =>
      app.request("/v1/namespaces/default/agents/once", {
        method: "PUT",
        headers: { ...auth(), "if-none-match": "*" },
        body: JSON.stringify(body),
      });
    expect((await create(agent("first"))).status).toBe(201);
    const again = await create(agent("second"));
    expect(again.status).toBe(409);
    expect(await again.json()).toMatchObject({ code: "ALREADY_EXISTS" });
    const stored = (await (
      await app.request("/v1/namespaces/default/agents/once", { headers: auth() })
    ).json()) as {
      spec: { model: { name: string } };
    };
    expect(stored.spec.model.name).toBe("first");
    expect((await put("/v1/namespaces/default/agents/once", agent("third"))).status).toBe(200);
  });

  it("answers unknown kinds with 404", async () => {
    expect((await app.request("/v1/namespaces/default/widgets/x", { headers: auth() })).status).toBe(404);
  });
});
