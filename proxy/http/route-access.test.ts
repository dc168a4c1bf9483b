import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { until } from "../../test/support/until.ts";
import type { FakeRunner } from "../testing/fake-runner.ts";
import { defaultHandler, provisioned as provisionedReply } from "../testing/fake-runner.ts";
import {
  ADMIN_TOKEN,
  RUNNER_TOKEN,
  startTestServer,
  TEST_IMAGE,
  type TestServer,
} from "../testing/test-server.ts";
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
  const text = await response.text();
  return { status: response.status, text, body: JSON.parse(text) as Json };
}

async function createToken(name: string, scopes: string[], ttl?: string): Promise<string> {
  const created = await call("POST", "/v1/tokens", ADMIN_TOKEN, { name, scopes, ...(ttl ? { ttl } : {}) });
  if (created.status !== 201) throw new Error(`token ${name}: ${JSON.stringify(created.body)}`);
  return created.body.token as string;
}

const API = "agent-sessions.dev/v1alpha1";
const DIGEST = TEST_IMAGE.split("@")[1] ?? "";
let runner: FakeRunner;
/** Team-a's RPC workspace with a live session and a stopped one, s's workspace and session, team-b's. */
const ids = { container: "", live: "", stopped: "", hsContainer: "", hsSession: "", bContainer: "" };
const admin = (method: string, path: string, body?: unknown) => call(method, path, ADMIN_TOKEN, body);
const rpc = async (method: string, body: unknown, token = ADMIN_TOKEN) =>
  call("POST", `/v1/rpc/${method}`, token, body);

/**
 * The namespaces, an RPC workspace, HarnessSessions s (Ready) and other: made before the tokens,
 * as a chat token is bound to its session's uid at issue time (a missing session gets none).
 */
async function setUp(): Promise<void> {
  runner = await t.runner({
    handler: (command) => {
      switch (command.kind) {
        case "provision":
          return provisionedReply(command, DIGEST);
        // Allowed writes are refused for their content, so the matrix changes nothing.
        case "remove":
          return { ok: false, error: { code: "FAILED_PRECONDITION", message: "the test runner keeps it" } };
        case "workspace_list":
        case "workspace_read":
        case "workspace_write":
        case "workspace_delete":
          return { ok: false, error: { code: "NOT_FOUND", message: "the test runner holds no files" } };
        default:
          return defaultHandler(command);
      }
    },
  });
  for (const ns of ["team-a", "team-b"]) {
    const runtime = await admin("PUT", `/v1/namespaces/${ns}/agentruntimes/reference`, {
      apiVersion: API,
      kind: "AgentRuntime",
      metadata: { name: "reference" },
      spec: { image: TEST_IMAGE, contract: "v1alpha2" },
    });
    expect(runtime.status, runtime.text).toBe(201);
    const agent = await admin("PUT", `/v1/namespaces/${ns}/agents/bob`, {
      apiVersion: API,
      kind: "Agent",
      metadata: { name: "bob" },
      spec: { runtimeRef: "reference" },
    });
    expect(agent.status, agent.text).toBe(201);
  }
  const provisioned = await rpc("ProvisionAgentWorkspace", { agent_ref: "team-a/bob", workstream: "w" });
  ids.container = provisioned.body.container_name;
  ids.stopped = (await rpc("StartAgentSession", { container_name: ids.container })).body.session_id;
  expect((await rpc("StopAgentSession", { session_id: ids.stopped })).status).toBe(200);
  ids.live = (await rpc("StartAgentSession", { container_name: ids.container })).body.session_id;
  ids.bContainer = (await rpc("SpawnAgent", { agent_ref: "team-b/bob" })).body.container_name;
  const hs = await admin("PUT", `/v1/namespaces/team-a/harnesssessions/s`, {
    apiVersion: API,
    kind: "HarnessSession",
    metadata: { name: "s" },
    spec: { agentRef: "bob", runtimeRef: "reference" },
  });
  expect(hs.status, hs.text).toBe(201);
  const status = await until("HarnessSession s Ready", async () => {
    const s = (await admin("GET", `/v1/namespaces/team-a/harnesssessions/s`)).body;
    return s.status?.phase === "Ready" ? s.status : undefined;
  });
  ids.hsContainer = status.containerName;
  ids.hsSession = status.sessionId;
  const other = await admin("PUT", "/v1/namespaces/team-a/harnesssessions/other", {
    apiVersion: API,
    kind: "HarnessSession",
    metadata: { name: "other" },
    spec: { agentRef: "bob", runtimeRef: "reference" },
  });
  expect(other.status, other.text).toBe(201);
}

beforeAll(async () => {
  t = await startTestServer();
  await setUp();
  tokens.admin = ADMIN_TOKEN;
  tokens.runner = RUNNER_TOKEN;
  tokens.edit = await createToken("edit", ["namespace:team-a:edit"]);
  tokens.view = await createToken("view", ["namespace:team-a:view"]);
  tokens.chat = await createToken("chat", ["session:team-a/s:chat"]);
  tokens.otherNamespace = await createToken("other-namespace", ["namespace:team-b:edit"]);
  tokens.otherSession = await createToken("other-session", ["session:team-a/other:chat"]);
  // Port tokens (issue 40): each opens one port of s and nothing else.
  tokens.port = await createToken("port", ["session:team-a/s:port:3000"]);
  tokens.otherPort = await createToken("other-port", ["session:team-a/s:port:3001"]);
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
/** A declared port of s (issue 40): its own port token, the session's chat, the namespace's edit. */
const PORT = ["admin", "edit", "chat", "port"];
const NS = "/v1/namespaces/team-a";

// Bodies are invalid or name nothing that exists: an allowed call answers 400/404 and changes nothing.
const ROUTES: readonly Route[] = [
  { method: "GET", path: "/v1/events?session_id=none", allowed: ANY },
  { method: "GET", path: "/v1/whoami", allowed: [...ANY, "port", "otherPort"] },
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
  // Not `s`: the owner matrix below reads s's workspace.
  { method: "DELETE", path: `${NS}/harnesssessions/gone`, allowed: EDIT },
  { method: "POST", path: `${NS}/harnesssessions/s/requests`, body: {}, allowed: CHAT },
  { method: "POST", path: `${NS}/harnesssessions/s/requests/r1/cancel`, allowed: CHAT },
  // The session's OpenAI-compatible API (issue 41): a chat token is enough, as for `…/requests`.
  { method: "POST", path: `${NS}/harnesssessions/s/openai/v1/chat/completions`, body: {}, allowed: CHAT },
  { method: "GET", path: `${NS}/harnesssessions/s/openai/v1/models`, allowed: CHAT },
  { method: "POST", path: `${NS}/agentruns`, body: {}, allowed: EDIT },
  // A session's port (issue 40), any method; s declares none, so an allowed call is a 404.
  { method: "GET", path: `${NS}/harnesssessions/s/ports/3000/`, allowed: PORT },
  { method: "POST", path: `${NS}/harnesssessions/s/ports/3000/a/b?c=d`, body: {}, allowed: PORT },
  { method: "DELETE", path: `${NS}/harnesssessions/s/ports/3000`, allowed: PORT },
  {
    method: "GET",
    path: `${NS}/harnesssessions/other/ports/3000/`,
    allowed: ["admin", "edit", "otherSession"],
  },
  // A session token reads its own HarnessSession's workspace (issue 18), writes none.
  { method: "GET", path: `${NS}/harnesssessions/s/workspace/files`, allowed: READ_SESSION },
  { method: "GET", path: `${NS}/harnesssessions/s/workspace/files/a.txt`, allowed: READ_SESSION },
  { method: "GET", path: `${NS}/harnesssessions/s/workspace:archive`, allowed: READ_SESSION },
  { method: "GET", path: `${NS}/harnesssessions/s/workspace:diff`, allowed: READ_SESSION },
  { method: "PUT", path: `${NS}/harnesssessions/s/workspace/files/a.txt`, body: "x", allowed: EDIT },
  { method: "DELETE", path: `${NS}/harnesssessions/s/workspace/files/a.txt`, allowed: EDIT },
  // SessionSnapshots (issue 38): edit snapshots, restores, exports, imports, deletes; view reads; chat none.
  { method: "POST", path: `${NS}/harnesssessions/s:snapshot`, body: {}, allowed: EDIT },
  { method: "POST", path: `${NS}/harnesssessions/s:restore`, body: {}, allowed: EDIT },
  { method: "GET", path: `${NS}/sessionsnapshots`, allowed: VIEW },
  { method: "GET", path: `${NS}/sessionsnapshots/x`, allowed: VIEW },
  { method: "DELETE", path: `${NS}/sessionsnapshots/x`, allowed: EDIT },
  { method: "GET", path: `${NS}/sessionsnapshots/x/archive`, allowed: EDIT },
  { method: "PUT", path: `${NS}/sessionsnapshots/x/archive`, body: "not gzip", allowed: EDIT },
  // RPCs naming an agent_ref: its namespace's edit (decided from the name: 403 leaks nothing).
  {
    method: "POST",
    path: "/v1/rpc/ProvisionAgentWorkspace",
    body: { agent_ref: "team-a/nobody" },
    allowed: EDIT,
  },
  { method: "POST", path: "/v1/rpc/SpawnAgent", body: { agent_ref: "team-a/nobody" }, allowed: EDIT },
  // Every token lists the sessions it can view (none for some); the owner matrix below has the rest.
  { method: "POST", path: "/v1/rpc/GetAgentStatus", body: {}, allowed: ANY },
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
  "port",
  "otherPort",
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
        // The OpenAI-compatible routes answer in OpenAI's shape, our code in `error.code`.
        const code = route.path.includes("/openai/") ? r.body.error?.code : r.body.code;
        if (r.status === 401) expect(code).toBe("UNAUTHENTICATED");
        if (r.status === 403) expect(code).toBe("PERMISSION_DENIED");
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
    for (const { status, body } of answers)
      expect({ status, body }).toEqual({
        status: 401,
        body: {
          code: "UNAUTHENTICATED",
          message: "the bearer token is not valid (unknown, expired or revoked)",
        },
      });
  });
});

/**
 * The RPCs and `/v1/workspaces/{container_name}/…` name global ids, so they are decided by the
 * namespace owning the container or session (rpc-access.ts). Each row names a real target and a
 * missing one: a caller that may not read the target gets the missing one's answer, byte for byte.
 */
describe("auth matrix: RPCs and RPC workspaces × every kind of caller, by owning namespace", () => {
  /** What a caller gets: `absent` is the answer for a container or session that does not exist. */
  type Outcome = "allowed" | "absent" | 401 | 403;
  type OwnedRoute = {
    name: string;
    /** The request naming `id` (a container_name or session_id). */
    request: (id: string) => { method: string; path: string; body?: unknown };
    target: () => string;
    /** Who may: all other valid tokens get `absent` if they may not read it, else 403. */
    allowed: readonly string[];
    readers: readonly string[];
    /**
     * An idempotent call whose allowed answer is the missing one's too (a stop of a stopped
     * session); what it must not do to another namespace is the "changes nothing" test's.
     */
    idempotent?: true;
  };
  const RPC_READ = ["admin", "edit", "view"];
  const HS_READ = ["admin", "edit", "view", "chat"];
  const rpcRow =
    (method: string, field: string, extra: Record<string, unknown> = {}) =>
    (id: string) => ({
      method: "POST",
      path: `/v1/rpc/${method}`,
      body: { [field]: id, ...extra },
    });
  const files =
    (suffix: string, method = "GET", body?: string) =>
    (id: string) => ({
      method,
      path: `/v1/workspaces/${id}/workspace${suffix}`,
      ...(body !== undefined ? { body } : {}),
    });
  const OWNED: readonly OwnedRoute[] = [
    {
      name: "StartAgentSession (its container has a live session: 409)",
      request: rpcRow("StartAgentSession", "container_name"),
      target: () => ids.container,
      allowed: EDIT,
      readers: RPC_READ,
    },
    {
      name: "StopAgentSession (a stopped session: idempotent)",
      request: rpcRow("StopAgentSession", "session_id"),
      target: () => ids.stopped,
      allowed: EDIT,
      readers: RPC_READ,
      idempotent: true,
    },
    {
      name: "ReloadAgentSession (its container has another live session: 409)",
      request: rpcRow("ReloadAgentSession", "session_id"),
      target: () => ids.stopped,
      allowed: EDIT,
      readers: RPC_READ,
    },
    {
      name: "SendAgentMessage",
      request: rpcRow("SendAgentMessage", "session_id", { message: { type: "message", text: "hi" } }),
      target: () => ids.live,
      allowed: EDIT,
      readers: RPC_READ,
    },
    {
      name: "RemoveAgentWorkspace (the runner refuses: 400)",
      request: rpcRow("RemoveAgentWorkspace", "container_name"),
      target: () => ids.container,
      allowed: EDIT,
      readers: RPC_READ,
    },
    {
      name: "GetAgentStatus of one session",
      request: rpcRow("GetAgentStatus", "session_id"),
      target: () => ids.live,
      allowed: RPC_READ,
      readers: RPC_READ,
    },
    {
      name: "GetAgentStatus of a HarnessSession's agent session",
      request: rpcRow("GetAgentStatus", "session_id"),
      target: () => ids.hsSession,
      allowed: HS_READ,
      readers: HS_READ,
    },
    {
      name: "GET files (list)",
      request: files("/files"),
      target: () => ids.container,
      allowed: RPC_READ,
      readers: RPC_READ,
    },
    {
      name: "GET files/{path}",
      request: files("/files/a.txt"),
      target: () => ids.container,
      allowed: RPC_READ,
      readers: RPC_READ,
    },
    {
      name: "GET :archive",
      request: files(":archive"),
      target: () => ids.container,
      allowed: RPC_READ,
      readers: RPC_READ,
    },
    {
      name: "GET :diff",
      request: files(":diff"),
      target: () => ids.container,
      allowed: RPC_READ,
      readers: RPC_READ,
    },
    {
      name: "PUT files/{path}",
      request: files("/files/a.txt", "PUT", "x"),
      target: () => ids.container,
      allowed: EDIT,
      readers: RPC_READ,
    },
    {
      name: "DELETE files/{path}",
      request: files("/files/a.txt", "DELETE"),
      target: () => ids.container,
      allowed: EDIT,
      readers: RPC_READ,
    },
    {
      name: "GET files of s's workspace",
      request: files("/files"),
      target: () => ids.hsContainer,
      allowed: HS_READ,
      readers: HS_READ,
    },
    {
      name: "GET files/{path} of s's workspace",
      request: files("/files/a.txt"),
      target: () => ids.hsContainer,
      allowed: HS_READ,
      readers: HS_READ,
    },
    {
      name: "GET :archive of s's workspace",
      request: files(":archive"),
      target: () => ids.hsContainer,
      allowed: HS_READ,
      readers: HS_READ,
    },
    {
      name: "GET :diff of s's workspace",
      request: files(":diff"),
      target: () => ids.hsContainer,
      allowed: HS_READ,
      readers: HS_READ,
    },
    {
      name: "PUT files/{path} of s's workspace",
      request: files("/files/a.txt", "PUT", "x"),
      target: () => ids.hsContainer,
      allowed: EDIT,
      readers: HS_READ,
    },
    {
      name: "DELETE files/{path} of s's workspace",
      request: files("/files/a.txt", "DELETE"),
      target: () => ids.hsContainer,
      allowed: EDIT,
      readers: HS_READ,
    },
  ];

  function outcomeOf(route: OwnedRoute, caller: (typeof CALLERS)[number]): Outcome {
    if (["none", "expired", "revoked", "unknown", "malformed"].includes(caller)) return 401;
    // A port token is refused by its kind (issue 40): no RPC, no files, whatever they name.
    if (caller === "runner" || caller === "port" || caller === "otherPort") return 403;
    if (route.allowed.includes(caller)) return route.idempotent ? "absent" : "allowed";
    return route.readers.includes(caller) ? 403 : "absent";
  }

  for (const route of OWNED)
    it(route.name, async () => {
      const real = route.target();
      const missing = real.startsWith("ses-") ? "ses-00000000000000000000" : "ws-does-not-exist";
      const m = route.request(missing);
      const absent = await call(m.method, m.path, ADMIN_TOKEN, m.body);
      const absentAnswer = `${absent.status} ${absent.text.replaceAll(missing, real)}`;
      const r = route.request(real);
      const seen: Record<string, Outcome> = {};
      const want: Record<string, Outcome> = {};
      for (const caller of CALLERS) {
        const answer = await call(r.method, r.path, caller === "none" ? undefined : tokens[caller], r.body);
        want[caller] = outcomeOf(route, caller);
        seen[caller] =
          answer.status === 401 || answer.status === 403
            ? answer.status
            : `${answer.status} ${answer.text}` === absentAnswer
              ? "absent"
              : "allowed";
        if (answer.status === 403) expect(answer.body.code).toBe("PERMISSION_DENIED");
        if (seen[caller] === "allowed") expect(answer.status, answer.text).toBeLessThan(500);
      }
      expect(seen).toEqual(want);
    });

  it("says a cross-namespace container or session is not found, with the missing one's code and message", async () => {
    const missing = await rpc("GetAgentStatus", { session_id: "ses-nothing" });
    const foreign = await rpc("GetAgentStatus", { session_id: ids.live }, tokens.otherNamespace);
    expect(missing).toMatchObject({
      status: 404,
      body: { code: "NOT_FOUND", message: "session ses-nothing not found" },
    });
    expect(foreign.status).toBe(404);
    expect(foreign.text).toBe(missing.text.replace("ses-nothing", ids.live));
    const files = await call("GET", `/v1/workspaces/${ids.container}/workspace/files`, tokens.chat);
    expect(files.body).toEqual({ code: "NOT_FOUND", message: `workspace ${ids.container} not found` });
  });

  it("names the scope a token that may read but not write is missing", async () => {
    const denied = await rpc("StopAgentSession", { session_id: ids.live }, tokens.view);
    expect(denied).toMatchObject({
      status: 403,
      body: {
        code: "PERMISSION_DENIED",
        message: "token view may not call StopAgentSession: it needs scope namespace:team-a:edit or admin",
        details: { required_scopes: ["namespace:team-a:edit", "admin"] },
      },
    });
  });

  it("changes nothing when another namespace stops, removes, reloads or messages a live session", async () => {
    const before = runner.commands.length;
    const other = tokens.otherNamespace;
    expect((await rpc("StopAgentSession", { session_id: ids.live }, other)).body).toEqual({
      session_id: ids.live,
      state: "STOPPED",
    });
    expect((await rpc("RemoveAgentWorkspace", { container_name: ids.container }, other)).body).toEqual({
      container_name: ids.container,
      removed: false,
    });
    expect((await rpc("ReloadAgentSession", { session_id: ids.live }, other)).status).toBe(404);
    expect(
      (await rpc("SendAgentMessage", { session_id: ids.live, message: { type: "message" } }, other)).status,
    ).toBe(404);
    expect(
      (await rpc("StartAgentSession", { container_name: ids.container, resume_session_id: ids.live }, other))
        .status,
    ).toBe(404);
    expect(runner.commands.length).toBe(before);
    expect((await rpc("GetAgentStatus", { session_id: ids.live })).body.sessions[0].state).toBe("READY");
  });

  it("decides ProvisionAgentWorkspace and SpawnAgent by the namespace of their agent_ref", async () => {
    const foreign = await rpc("SpawnAgent", { agent_ref: "team-b/bob" }, tokens.edit);
    expect(foreign).toMatchObject({
      status: 403,
      body: { code: "PERMISSION_DENIED", details: { required_scopes: ["namespace:team-b:edit", "admin"] } },
    });
    // `bob` alone is default/bob: team-a's token may not provision there.
    expect((await rpc("ProvisionAgentWorkspace", { agent_ref: "bob" }, tokens.edit)).status).toBe(403);
    for (const caller of ["view", "chat", "otherSession"])
      expect((await rpc("ProvisionAgentWorkspace", { agent_ref: "team-a/bob" }, tokens[caller])).status).toBe(
        403,
      );
    // Allowed, and refused for its content: team-a/bob already has a live session.
    const spawned = await rpc("SpawnAgent", { agent_ref: "team-a/bob" }, tokens.edit);
    expect(spawned.status).toBe(409);
    expect(spawned.body.code).toBe("ALREADY_EXISTS");
  });

  it("lists, page by page, only the sessions of the namespaces a token can view", async () => {
    const listAll = async (token: string) => {
      const seen: Json[] = [];
      let page_token: string | undefined;
      do {
        const page = await rpc(
          "GetAgentStatus",
          { page_size: 1, ...(page_token ? { page_token } : {}) },
          token,
        );
        expect(page.status, page.text).toBe(200);
        expect(page.body.sessions.length).toBeLessThanOrEqual(1);
        seen.push(...page.body.sessions);
        page_token = page.body.next_page_token;
      } while (page_token);
      return seen.map((s) => s.agent_ref as string);
    };
    const everyone = await listAll(ADMIN_TOKEN);
    expect(new Set(everyone)).toEqual(new Set(["team-a/bob", "team-b/bob"]));
    const teamA = everyone.filter((ref) => ref === "team-a/bob");
    expect(await listAll(tokens.view as string)).toEqual(teamA);
    expect(await listAll(tokens.edit as string)).toEqual(teamA);
    expect(await listAll(tokens.otherNamespace as string)).toEqual(["team-b/bob"]);
    expect(await listAll(tokens.chat as string)).toEqual([]);
  });
});
