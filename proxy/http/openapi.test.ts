import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Rpc, type RpcMethod } from "../../contracts/rpc.ts";
import { buildApp } from "./app.ts";
import { EventBus } from "../lifecycle/event-bus.ts";
import type { RpcHandlers } from "../lifecycle/lifecycle.ts";
import type { JsonObject } from "./openapi.ts";
import { SqliteStore } from "../store/sqlite-store.ts";
import { ADMIN_TOKEN, RUNNER_TOKEN } from "../testing/test-server.ts";

let store: SqliteStore;
let doc: JsonObject;

beforeAll(async () => {
  store = new SqliteStore(":memory:");
  const app = buildApp({
    store,
    bus: new EventBus(),
    rpc: {} as RpcHandlers,
    adminToken: ADMIN_TOKEN,
    runnerToken: RUNNER_TOKEN,
  });
  // No token: the document is public, like /healthz.
  const response = await app.request("/openapi.json");
  expect(response.status).toBe(200);
  expect(response.headers.get("content-type")).toContain("application/json");
  doc = JSON.parse(await response.text()) as JsonObject;
});
afterAll(async () => {
  await store.close();
});

const schemas = () => (doc.components as { schemas: Record<string, JsonObject> }).schemas;
const paths = () => doc.paths as Record<string, Record<string, JsonObject>>;

/** The request body schema of `POST /v1/rpc/{method}`, its $ref resolved. */
function requestSchema(method: RpcMethod): JsonObject {
  const op = paths()[`/v1/rpc/${method}`]?.post as {
    requestBody: { content: { "application/json": { schema: { $ref: string } } } };
  };
  const ref = op.requestBody.content["application/json"].schema.$ref;
  const schema = schemas()[ref.replace("#/components/schemas/", "")];
  if (!schema) throw new Error(`dangling ${ref}`);
  return schema;
}

/**
 * A small JSON Schema (2020-12) checker for the keywords zod emits for our contracts: enough to
 * compare what the document promises with what the server's zod parse does.
 */
function validates(schema: JsonObject, value: unknown): boolean {
  const s = schema as Record<string, unknown>;
  if (s.$ref) return validates(schemas()[String(s.$ref).replace("#/components/schemas/", "")] ?? {}, value);
  if (Array.isArray(s.anyOf) && !s.anyOf.some((sub) => validates(sub as JsonObject, value))) return false;
  if (Array.isArray(s.oneOf) && s.oneOf.filter((sub) => validates(sub as JsonObject, value)).length !== 1)
    return false;
  if ("const" in s && value !== s.const) return false;
  if (Array.isArray(s.enum) && !s.enum.includes(value)) return false;
  switch (s.type) {
    case undefined:
      break;
    case "string":
      if (typeof value !== "string") return false;
      if (typeof s.minLength === "number" && value.length < s.minLength) return false;
      if (typeof s.maxLength === "number" && value.length > s.maxLength) return false;
      if (typeof s.pattern === "string" && !new RegExp(s.pattern, "u").test(value)) return false;
      break;
    case "integer":
    case "number":
      if (typeof value !== "number" || (s.type === "integer" && !Number.isInteger(value))) return false;
      if (typeof s.minimum === "number" && value < s.minimum) return false;
      if (typeof s.maximum === "number" && value > s.maximum) return false;
      break;
    case "boolean":
      if (typeof value !== "boolean") return false;
      break;
    case "array":
      if (!Array.isArray(value)) return false;
      if (typeof s.maxItems === "number" && value.length > s.maxItems) return false;
      if (s.items && !value.every((v) => validates(s.items as JsonObject, v))) return false;
      break;
    case "object": {
      if (!value || typeof value !== "object" || Array.isArray(value)) return false;
      const object = value as Record<string, unknown>;
      const properties = (s.properties ?? {}) as Record<string, JsonObject>;
      for (const key of (s.required ?? []) as string[]) if (!(key in object)) return false;
      for (const [key, v] of Object.entries(object)) {
        const property = properties[key];
        if (property) {
          if (!validates(property, v)) return false;
        } else if (s.additionalProperties === false) return false;
        else if (s.additionalProperties && typeof s.additionalProperties === "object") {
          if (!validates(s.additionalProperties as JsonObject, v)) return false;
        }
      }
      break;
    }
    default:
      throw new Error(`the checker does not know type ${String(s.type)}`);
  }
  return true;
}

describe("GET /openapi.json", () => {
  it("is an OpenAPI 3.1 document with bearer security", () => {
    expect(doc.openapi).toBe("3.1.0");
    expect(doc.security).toEqual([{ bearer: [] }]);
    expect((doc.components as JsonObject).securitySchemes).toEqual({
      bearer: expect.objectContaining({ type: "http", scheme: "bearer" }),
    });
    for (const open of ["/healthz", "/readyz", "/openapi.json"])
      expect(paths()[open]?.get?.security, open).toEqual([]);
  });

  it("lists every RPC of contracts/rpc.ts with its request and response schema", () => {
    const methods = Object.keys(Rpc) as RpcMethod[];
    expect(methods.length).toBeGreaterThanOrEqual(7);
    for (const method of methods) {
      const op = paths()[`/v1/rpc/${method}`]?.post as JsonObject | undefined;
      expect(op, method).toBeDefined();
      expect(op?.operationId).toBe(method);
      expect(schemas()[`${method}Request`], method).toBeDefined();
      expect(schemas()[`${method}Response`], method).toBeDefined();
      // Which scope it needs (issue 17): the namespace's edit for writes, view for reads.
      expect(op?.description, method).toMatch(/^Scope: .*namespace:<ns>:(edit|view)/);
    }
    const rpcPaths = Object.keys(paths()).filter((p) => p.startsWith("/v1/rpc/"));
    expect(rpcPaths.sort()).toEqual(methods.map((m) => `/v1/rpc/${m}`).sort());
  });

  it("describes the resource kinds, the error body and the event stream", () => {
    for (const kind of ["AgentRuntime", "Agent", "HarnessSession"]) {
      expect(schemas()[kind], kind).toBeDefined();
      expect(schemas()[`${kind}Input`], kind).toBeDefined();
      expect(schemas()[`${kind}List`], kind).toBeDefined();
    }
    for (const path of [
      "/v1/namespaces/{namespace}/agentruntimes/{name}",
      "/v1/namespaces/{namespace}/agents/{name}",
      "/v1/namespaces/{namespace}/harnesssessions/{name}",
      "/v1/namespaces/{namespace}/harnesssessions/{name}/requests",
      "/v1/namespaces/{namespace}/harnesssessions/{name}/openai/v1/chat/completions",
      "/v1/namespaces/{namespace}/harnesssessions/{name}/openai/v1/models",
      "/v1/namespaces/{namespace}/harnesssessions/{name}/workspace/files",
      "/v1/namespaces/{namespace}/harnesssessions/{name}/workspace/files/{path}",
      "/v1/namespaces/{namespace}/harnesssessions/{name}/workspace:archive",
      "/v1/workspaces/{container_name}/workspace/files",
      "/v1/workspaces/{container_name}/workspace/files/{path}",
      "/v1/workspaces/{container_name}/workspace:archive",
      "/v1/runners",
      "/v1/runners/{runner}",
      "/v1/runners/{runner}:drain",
      "/v1/runners/{runner}:undrain",
      "/v1/tokens",
      "/v1/tokens/{name}",
      "/v1/whoami",
      "/v1/namespaces/{namespace}/harnesssessions/{name}:snapshot",
      "/v1/namespaces/{namespace}/harnesssessions/{name}:restore",
      "/v1/namespaces/{namespace}/sessionsnapshots",
      "/v1/namespaces/{namespace}/sessionsnapshots/{name}",
      "/v1/namespaces/{namespace}/sessionsnapshots/{name}/archive",
    ])
      expect(paths()[path], path).toBeDefined();
    // An Agent is answered with write-only credentials: no `value` in what GET returns.
    const credential = JSON.stringify(schemas().Agent);
    expect(credential).toContain("valueSet");
    expect(credential).not.toContain('"value"');
    expect(schemas().RunnerInfo?.required).toEqual(
      expect.arrayContaining(["capacity", "labels", "load", "connected", "draining"]),
    );
    expect(Object.keys(paths()["/v1/namespaces/{namespace}/harnesssessions/{name}"] ?? {})).toEqual(
      expect.arrayContaining(["get", "put", "patch", "delete"]),
    );
    expect(schemas().Error?.required).toEqual(["code", "message"]);
    const events = paths()["/v1/events"]?.get as { responses: Record<string, { content: JsonObject }> };
    expect(Object.keys(events.responses["200"]?.content ?? {})).toEqual(["text/event-stream"]);
    // Every $ref resolves.
    const refs = JSON.stringify(doc).match(/"\$ref":"#\/components\/(schemas|responses)\/[^"]+"/g) ?? [];
    for (const r of refs) {
      const [, section, name] = /#\/components\/(\w+)\/([^"]+)/.exec(r) ?? [];
      expect((doc.components as Record<string, JsonObject>)[section ?? ""]?.[name ?? ""], r).toBeDefined();
    }
  });

  it("request schemas accept and reject what the server's zod schemas accept and reject", () => {
    const samples: [RpcMethod, unknown][] = [
      ["ProvisionAgentWorkspace", { agent_ref: "alice", client_request_id: "r-1" }],
      ["ProvisionAgentWorkspace", { agent_ref: "team/alice", workstream: "w", client_request_id: "" }],
      ["ProvisionAgentWorkspace", { agent_ref: "Alice!", client_request_id: "r-1" }],
      ["ProvisionAgentWorkspace", { agent_ref: "alice" }],
      ["ProvisionAgentWorkspace", { agent_ref: "alice", client_request_id: "r 1" }],
      ["ProvisionAgentWorkspace", { agent_ref: "alice", client_request_id: "r-1", extra: true }],
      ["ProvisionAgentWorkspace", { agent_ref: "alice", workstream: "UPPER", client_request_id: "r" }],
      ["StartAgentSession", { container_name: "c", resume_session_id: "s-1" }],
      ["StartAgentSession", { container_name: "" }],
      ["StopAgentSession", { session_id: "x".repeat(129) }],
      ["GetAgentStatus", {}],
      ["GetAgentStatus", { session_id: 7 }],
      ["RemoveAgentWorkspace", { container_name: "c" }],
    ];
    for (const [method, sample] of samples) {
      const zod = Rpc[method].request.safeParse(sample).success;
      expect(validates(requestSchema(method), sample), `${method} ${JSON.stringify(sample)}`).toBe(zod);
    }
    // The samples exercise both answers.
    expect(new Set(samples.map(([m, s]) => Rpc[m].request.safeParse(s).success))).toEqual(
      new Set([true, false]),
    );
  });

  it("describes Webhooks: their paths, the events a spec may name, and the deliveries list", () => {
    const base = "/v1/namespaces/{namespace}/webhooks";
    expect(Object.keys(paths()[`${base}/{name}`] ?? {})).toEqual(
      expect.arrayContaining(["get", "put", "delete"]),
    );
    expect(paths()[`${base}/{name}/deliveries`]?.get?.operationId).toBe("listWebhookDeliveries");
    const input = schemas().WebhookInput as JsonObject;
    const hook = {
      apiVersion: "agent-sessions.dev/v1alpha1",
      kind: "Webhook",
      metadata: { name: "portal" },
      spec: { url: "https://93.184.215.14/hooks", events: ["ready", "snapshot.ready"] },
    };
    expect(validates(input, hook)).toBe(true);
    expect(validates(input, { ...hook, spec: { ...hook.spec, events: ["readyy"] } })).toBe(false);
    expect(schemas().WebhookDeliveryList).toBeDefined();
  });
});
