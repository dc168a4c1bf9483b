import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { RUNNER_PROTOCOL_VERSION, type RunnerCommand } from "../../contracts/runner-protocol.ts";
import { until } from "../../test/support/until.ts";
import { PORT_REPLY_SANDBOX } from "../relay/port-relay.ts";
import type { FakeRunner, Reply } from "../testing/fake-runner.ts";
import { defaultHandler, provisioned } from "../testing/fake-runner.ts";
import { ADMIN_TOKEN, startTestServer, TEST_IMAGE, type TestServer } from "../testing/test-server.ts";

// biome-ignore lint/suspicious/noExplicitAny: JSON bodies of many shapes, read by assertions
type Json = any;

const DIGEST = TEST_IMAGE.split("@")[1] ?? "";
const BASE = "/v1/namespaces/default/harnesssessions";
type PortCommand = Extract<RunnerCommand, { kind: "port_request" }>;

let t: TestServer;
let runner: FakeRunner;
/** What the fake runner does with a `port_request`; the default answers like a small web server. */
let onPort: (command: PortCommand, runner: FakeRunner) => Reply | Promise<Reply>;

const answer = (command: PortCommand, r: FakeRunner): Reply => {
  const send = (payload: Record<string, unknown>) =>
    r.send({
      version: RUNNER_PROTOCOL_VERSION,
      type: "relay_chunk",
      payload: { relay_id: command.relay_id, data: "", done: false, ...payload } as never,
    });
  send({
    status: 201,
    headers: [
      ["content-type", "text/plain"],
      ["set-cookie", "sid=1; Path=/"],
      ["x-app", "yes"],
    ],
  });
  send({ data: Buffer.from(`you sent ${command.method} ${command.path}`).toString("base64") });
  send({ data: "", done: true });
  return { ok: true, result: { status: 201 } };
};

async function call(
  method: string,
  path: string,
  body?: string | Uint8Array,
  headers: Record<string, string> = {},
) {
  return fetch(`${t.server.url}${path}`, {
    method,
    headers: { authorization: `Bearer ${ADMIN_TOKEN}`, ...headers },
    ...(body !== undefined ? { body } : {}),
  });
}

async function readySession(ports: unknown): Promise<Json> {
  const put = await call(
    "PUT",
    `${BASE}/web`,
    JSON.stringify({
      apiVersion: "agent-sessions.dev/v1alpha1",
      kind: "HarnessSession",
      metadata: { name: "web" },
      spec: { agentRef: "alice", runtimeRef: "reference", ports },
    }),
    { "content-type": "application/json" },
  );
  expect(put.status, await put.clone().text()).toBe(201);
  return until("Ready", async () => {
    const s = (await (await call("GET", `${BASE}/web`)).json()) as Json;
    return s.status.phase === "Ready" ? s : undefined;
  });
}

const portCommands = () => runner.commands.filter((c) => c.kind === "port_request") as PortCommand[];

beforeEach(async () => {
  t = await startTestServer({ requestTimeoutMs: 1_500, idleCheckMs: 100, requestsPerTokenMax: 1 });
  onPort = answer;
  runner = await t.runner({
    handler: (command) => {
      switch (command.kind) {
        case "provision":
          return provisioned(command, DIGEST);
        case "port_request":
          return onPort(command, runner);
        default:
          return defaultHandler(command);
      }
    },
  });
});
afterEach(async () => {
  await t.close();
});

describe("a session's port through the proxy", () => {
  it("relays method, path, query, headers and body to the declared port, and the reply back sandboxed", async () => {
    const session = await readySession([{ port: 3000, name: "web" }]);
    const r = await call("POST", `${BASE}/web/ports/3000/api/items?sort=asc&x=%2F`, "a body", {
      "content-type": "text/plain",
      "x-custom": "kept",
      connection: "keep-alive",
    });
    expect(r.status).toBe(201);
    expect(await r.text()).toBe("you sent POST /api/items?sort=asc&x=%2F");
    expect(r.headers.get("x-app")).toBe("yes");
    // The API's origin is not the session's: its page runs sandboxed, its cookies are dropped.
    expect(r.headers.get("content-security-policy")).toBe(PORT_REPLY_SANDBOX);
    expect(r.headers.get("set-cookie")).toBeNull();
    const [sent] = portCommands();
    expect(sent).toMatchObject({
      container_name: session.status.containerName,
      port: 3000,
      method: "POST",
      path: "/api/items?sort=asc&x=%2F",
    });
    expect(Buffer.from(sent?.body ?? "", "base64").toString()).toBe("a body");
    const headers = Object.fromEntries(sent?.headers ?? []);
    expect(headers).toMatchObject({ "content-type": "text/plain", "x-custom": "kept" });
    // The caller's token and hop-by-hop headers never reach the session.
    expect(headers.authorization).toBeUndefined();
    expect(headers.connection).toBeUndefined();
    // The session's activity, counted like a request.
    const after = (await (await call("GET", `${BASE}/web`)).json()) as Json;
    expect(after.status.requestCount).toBe(1);
    expect(after.status.lastRequestId).toMatch(/^port-3000-[0-9a-f]{12}$/);
    expect(after.status.lastRequestOutcome).toBe("succeeded");
    // `…/ports/3000` alone is the session's `/`.
    const root = await call("GET", `${BASE}/web/ports/3000`);
    expect(await root.text()).toBe("you sent GET /");
  });

  it("refuses an undeclared port, a bad port and a body over 4 MiB without sending anything", async () => {
    await readySession([{ port: 3000, name: "web" }]);
    const undeclared = await call("GET", `${BASE}/web/ports/3001/`);
    expect(undeclared.status).toBe(404);
    expect(((await undeclared.json()) as Json).message).toMatch(
      /port 3001 is not declared .*spec\.ports: 3000/,
    );
    const adapter = await call("GET", `${BASE}/web/ports/8080/v1/requests`);
    expect(adapter.status).toBe(404);
    const bad = await call("GET", `${BASE}/web/ports/web/`);
    expect(bad.status).toBe(400);
    const big = await call("PUT", `${BASE}/web/ports/3000/upload`, new Uint8Array(4 * 1024 * 1024 + 1));
    expect(big.status).toBe(413);
    expect(portCommands()).toEqual([]);
    const after = (await (await call("GET", `${BASE}/web`)).json()) as Json;
    expect(after.status.requestCount).toBe(0);
  });

  it("answers the runner's refusal with its code and counts the request failed", async () => {
    await readySession([{ port: 3000, name: "web" }]);
    onPort = () => ({
      ok: false,
      error: { code: "UNAVAILABLE", message: "nothing listens on port 3000 in the session" },
    });
    const r = await call("GET", `${BASE}/web/ports/3000/`);
    expect(r.status).toBe(503);
    expect(((await r.json()) as Json).message).toMatch(/port 3000: nothing listens/);
    const after = (await (await call("GET", `${BASE}/web`)).json()) as Json;
    expect(after.status).toMatchObject({ requestCount: 1, errorCount: 1, lastRequestOutcome: "failed" });
  });

  it("mints a short-lived token of one port with its URL, for a declared port only", async () => {
    await readySession([{ port: 3000, name: "web" }]);
    const minted = await call("POST", `${BASE}/web/porttokens`, JSON.stringify({ port: 3000 }), {
      "content-type": "application/json",
    });
    expect(minted.status).toBe(201);
    const body = (await minted.json()) as Json;
    expect(body.scopes).toEqual(["session:default/web:port:3000"]);
    expect(body.url).toBe(`${t.server.url}${BASE}/web/ports/3000/`);
    const lifetime = Date.parse(body.expiresAt) - Date.parse(body.createdAt);
    expect(lifetime).toBe(15 * 60_000);
    const withIt = await fetch(`${body.url}x`, { headers: { authorization: `Bearer ${body.token}` } });
    expect(withIt.status).toBe(201);
    const otherRoute = await fetch(`${t.server.url}${BASE}/web`, {
      headers: { authorization: `Bearer ${body.token}` },
    });
    expect(otherRoute.status).toBe(403);
    for (const [request, status] of [
      [{ port: 3001 }, 404],
      [{ port: 3000, ttl: "25h" }, 400],
      [{ port: 80 }, 400],
    ] as const) {
      const refused = await call("POST", `${BASE}/web/porttokens`, JSON.stringify(request), {
        "content-type": "application/json",
      });
      expect(refused.status, JSON.stringify(request)).toBe(status);
    }
  });

  it("counts against the token's requests in flight, like a request: one more is 429 until it ends", async () => {
    await readySession([{ port: 3000, name: "web" }]);
    const minted = (await (
      await call("POST", `${BASE}/web/porttokens`, JSON.stringify({ port: 3000 }), {
        "content-type": "application/json",
      })
    ).json()) as Json;
    let finish: () => void = () => {};
    const held = new Promise<void>((resolve) => {
      finish = resolve;
    });
    onPort = async (command, r) => {
      await held;
      return answer(command, r);
    };
    const auth = { authorization: `Bearer ${minted.token}` };
    const first = fetch(`${minted.url}slow`, { headers: auth });
    await until("the first in flight", () => portCommands().length === 1 || undefined);
    const second = await fetch(`${minted.url}other`, { headers: auth });
    expect(second.status, await second.clone().text()).toBe(429);
    finish();
    expect((await first).status).toBe(201);
    const third = await fetch(`${minted.url}again`, { headers: auth });
    expect(third.status).toBe(201);
  });
});
