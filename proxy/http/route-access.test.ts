import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ADMIN_TOKEN, RUNNER_TOKEN, startTestServer, type TestServer } from "../testing/test-server.ts";
import { needOf } from "./route-access.ts";

// biome-ignore lint/suspicious/noExplicitAny: JSON bodies of many shapes, read by assertions
type Json = any;

let t: TestServer;
const tokens: Record<string, string> = {};

async function call(method: string, path: string, token: string | undefined, body?: unknown) {
  const headers: Record<string, string> = { "content-type": "application/json" };
  if (token !== undefined) headers.authorization = `Bearer ${token}`;
  const response = await fetch(`${t.server.url}${path}`, {
    method,
    headers,
    ...(body !== undefined ? { body: typeof body === "string" ? body : JSON.stringify(body) } : {}),
  });
  return { status: response.status, body: (await response.json()) as Json };
}

async function createToken(name: string, scopes: string[], ttl?: string): Promise<string> {
  const created = await call("POST", "/v1/tokens", ADMIN_TOKEN, { name, scopes, ...(ttl ? { ttl } : {}) });
  if (created.status !== 201) throw new Error(`token ${name}: ${JSON.stringify(created.body)}`);
  return created.body.token as string;
}

beforeAll(async () => {
  t = await startTestServer();
  tokens.admin = ADMIN_TOKEN;
  tokens.runner = RUNNER_TOKEN;
  tokens.edit = await createToken("edit", ["namespace:team-a:edit"]);
  tokens.view = await createToken("view", ["namespace:team-a:view"]);
  tokens.chat = await createToken("chat", ["session:team-a/s:chat"]);
  tokens.otherNamespace = await createToken("other-namespace", ["namespace:team-b:edit"]);
  tokens.otherSession = await createToken("other-session", ["session:team-a/other:chat"]);
  tokens.expired = await createToken("expired", ["namespace:team-a:edit"], "1ms");
  tokens.revoked = await createToken("revoked", ["namespace:team-a:edit"]);
  expect((await call("DELETE", "/v1/tokens/revoked", ADMIN_TOKEN)).status).toBe(200);
  tokens.unknown = `ast_${"x".repeat(43)}`;
  tokens.malformed = "not a token at all";
  // The expired token's 1 ms are over before the matrix runs.
  await new Promise((resolve) => setTimeout(resolve, 20));
});
afterAll(async () => {
  await t.close();
});

type Expect = "allowed" | 401 | 403;
type Route = { method: string; path: string; body?: unknown; allowed: readonly string[] };

const EDIT = ["admin", "edit"];
const VIEW = ["admin", "edit", "view"];
const CHAT = ["admin", "edit", "chat"];
const READ_SESSION = ["admin", "edit", "view", "chat"];
const ADMIN = ["admin"];
const ANY = ["admin", "edit", "view", "chat", "otherNamespace", "otherSession"];
const NS = "/v1/namespaces/team-a";

// Bodies are invalid or name nothing that exists: an allowed call answers 400/404 and changes nothing.
const ROUTES: readonly Route[] = [
  { method: "GET", path: "/v1/events?session_id=none", allowed: ANY },
  { method: "GET", path: "/v1/whoami", allowed: ANY },
  { method: "GET", path: `${NS}/agents`, allowed: VIEW },
  { method: "GET", path: `${NS}/agents/x`, allowed: VIEW },
  { method: "PUT", path: `${NS}/agents/x`, body: {}, allowed: EDIT },
  { method: "DELETE", path: `${NS}/agents/x`, allowed: EDIT },
  { method: "GET", path: `${NS}/agentruntimes`, allowed: VIEW },
  { method: "GET", path: `${NS}/agentruntimes/x`, allowed: VIEW },
  { method: "PUT", path: `${NS}/agentruntimes/x`, body: {}, allowed: EDIT },
  { method: "DELETE", path: `${NS}/agentruntimes/x`, allowed: EDIT },
  { method: "GET", path: `${NS}/harnesssessions`, allowed: VIEW },
  { method: "GET", path: `${NS}/harnesssessions/s`, allowed: READ_SESSION },
  { method: "PUT", path: `${NS}/harnesssessions/s`, body: {}, allowed: EDIT },
  { method: "PATCH", path: `${NS}/harnesssessions/s`, body: [], allowed: EDIT },
  { method: "DELETE", path: `${NS}/harnesssessions/s`, allowed: EDIT },
  { method: "POST", path: `${NS}/harnesssessions/s/requests`, body: {}, allowed: CHAT },
  { method: "POST", path: `${NS}/harnesssessions/s/requests/r1/cancel`, allowed: CHAT },
  { method: "POST", path: `${NS}/agentruns`, body: {}, allowed: EDIT },
  { method: "GET", path: `${NS}/harnesssessions/s/workspace/files`, allowed: VIEW },
  { method: "GET", path: `${NS}/harnesssessions/s/workspace/files/a.txt`, allowed: VIEW },
  { method: "GET", path: `${NS}/harnesssessions/s/workspace:archive`, allowed: VIEW },
  { method: "PUT", path: `${NS}/harnesssessions/s/workspace/files/a.txt`, body: "x", allowed: EDIT },
  { method: "DELETE", path: `${NS}/harnesssessions/s/workspace/files/a.txt`, allowed: EDIT },
  { method: "POST", path: "/v1/rpc/GetAgentStatus", body: { session_id: "none" }, allowed: ADMIN },
  { method: "GET", path: "/v1/runners", allowed: ADMIN },
  { method: "GET", path: "/v1/tokens", allowed: ADMIN },
  { method: "POST", path: "/v1/tokens", body: {}, allowed: ADMIN },
  { method: "DELETE", path: "/v1/tokens/none", allowed: ADMIN },
];
const CALLERS = [
  "none",
  "admin",
  "edit",
  "view",
  "chat",
  "otherNamespace",
  "otherSession",
  "expired",
  "revoked",
  "unknown",
  "malformed",
  "runner",
] as const;

function expected(route: Route, caller: (typeof CALLERS)[number]): Expect {
  if (["none", "expired", "revoked", "unknown", "malformed"].includes(caller)) return 401;
  if (caller === "runner") return 403;
  return route.allowed.includes(caller) ? "allowed" : 403;
}

describe("auth matrix: every client route × every kind of caller", () => {
  for (const route of ROUTES)
    it(`${route.method} ${route.path}`, async () => {
      const seen: Record<string, Expect> = {};
      const want: Record<string, Expect> = {};
      for (const caller of CALLERS) {
        const r = await call(
          route.method,
          route.path,
          caller === "none" ? undefined : tokens[caller],
          route.body,
        );
        seen[caller] = r.status === 401 || r.status === 403 ? r.status : "allowed";
        want[caller] = expected(route, caller);
        if (r.status === 401) expect(r.body.code).toBe("UNAUTHENTICATED");
        if (r.status === 403) expect(r.body.code).toBe("PERMISSION_DENIED");
        // Allowed calls were refused for their content, never served something of another caller.
        if (seen[caller] === "allowed") expect(r.status, JSON.stringify(r.body)).toBeLessThan(500);
      }
      expect(seen).toEqual(want);
    });

  it("lists every rule of route-access.ts in the matrix (a new route gets a row)", () => {
    for (const route of ROUTES) {
      const need = needOf(route.method, route.path.split("?")[0] ?? "");
      expect(
        need === "authenticated" || need === "owner" || need.kind !== "admin" || route.allowed === ADMIN,
      ).toBe(true);
    }
  });
});

describe("what a refusal says", () => {
  it("names the scope that is missing, and nothing about what exists", async () => {
    const denied = await call("PUT", `${NS}/harnesssessions/s`, tokens.view, {});
    expect(denied).toMatchObject({
      status: 403,
      body: {
        code: "PERMISSION_DENIED",
        message: `token view may not PUT ${NS}/harnesssessions/s: it needs scope namespace:team-a:edit or admin`,
        details: { required_scopes: ["namespace:team-a:edit", "admin"] },
      },
    });
    // Another namespace's existing and missing sessions are refused alike.
    const existing = await call("GET", "/v1/namespaces/default/agents/alice", tokens.otherNamespace);
    const missing = await call("GET", "/v1/namespaces/default/agents/nobody", tokens.otherNamespace);
    expect(existing.status).toBe(403);
    expect(missing.status).toBe(403);
    expect(existing.body.message.replace("alice", "X")).toBe(missing.body.message.replace("nobody", "X"));
  });

  it("says an expired, revoked or unknown token is not valid, one answer for all", async () => {
    const answers = await Promise.all(
      [tokens.expired, tokens.revoked, tokens.unknown].map((token) => call("GET", `${NS}/agents`, token)),
    );
    for (const a of answers)
      expect(a).toEqual({
        status: 401,
        body: {
          code: "UNAUTHENTICATED",
          message: "the bearer token is not valid (unknown, expired or revoked)",
        },
      });
  });
});
