import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { until } from "../../test/support/until.ts";
import { SseClient } from "../testing/sse-client.ts";
import { ADMIN_TOKEN, startTestServer, TEST_IMAGE, type TestServer } from "../testing/test-server.ts";

// biome-ignore lint/suspicious/noExplicitAny: JSON bodies of many shapes, read by assertions
type Json = any;

let t: TestServer;
beforeEach(async () => {
  // OTHER_KEY: the variable the write-only tests' Agent names in a secretRef (offered, or its PUT is 400).
  t = await startTestServer({}, { secretEnv: { OTHER_KEY: "sk-other-offered-0123" } });
});
afterEach(async () => {
  await t.close();
});

async function call(method: string, path: string, body?: unknown, token = ADMIN_TOKEN) {
  const response = await fetch(`${t.server.url}${path}`, {
    method,
    headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });
  return { status: response.status, text: await response.text() };
}
const json = async (r: Promise<{ status: number; text: string }>) => {
  const { status, text } = await r;
  return { status, body: JSON.parse(text) as Json };
};

/** A HarnessSession to issue a chat token for (a chat token is bound to its session's uid). */
async function harnessSession(name: string, agentRef = "alice", desiredState = "running"): Promise<void> {
  const created = await call("PUT", `/v1/namespaces/default/harnesssessions/${name}`, {
    apiVersion: "agent-sessions.dev/v1alpha1",
    kind: "HarnessSession",
    metadata: { name },
    spec: { agentRef, runtimeRef: "reference", desiredState },
  });
  expect(created.status, created.text).toBe(201);
}

describe("/v1/tokens", () => {
  it("shows the secret once, lists tokens without it, and a revoked token stops working", async () => {
    const created = await json(
      call("POST", "/v1/tokens", { name: "portal", scopes: ["namespace:default:view"] }),
    );
    expect(created.status).toBe(201);
    const secret = created.body.token as string;
    expect(secret).toMatch(/^ast_[A-Za-z0-9_-]{43}$/);
    expect(created.body).toMatchObject({ name: "portal", scopes: ["namespace:default:view"] });
    expect(created.body.expiresAt).toBeUndefined();
    // The answer holding a new secret is never cached, nor sniffed into something else.
    const headers = (
      await fetch(`${t.server.url}/v1/tokens`, {
        method: "POST",
        headers: { authorization: `Bearer ${ADMIN_TOKEN}`, "content-type": "application/json" },
        body: JSON.stringify({ name: "headers", scopes: ["namespace:default:view"] }),
      })
    ).headers;
    expect(headers.get("cache-control")).toBe("no-store");
    expect(headers.get("x-content-type-options")).toBe("nosniff");
    expect((await call("DELETE", "/v1/tokens/headers")).status).toBe(200);

    const listed = await call("GET", "/v1/tokens");
    expect(listed.text).not.toContain(secret);
    expect(JSON.parse(listed.text).items).toEqual([
      {
        name: "portal",
        id: created.body.id,
        scopes: ["namespace:default:view"],
        createdAt: created.body.createdAt,
      },
    ]);

    expect((await call("GET", "/v1/namespaces/default/agents", undefined, secret)).status).toBe(200);
    expect(await json(call("DELETE", "/v1/tokens/portal"))).toEqual({
      status: 200,
      body: { name: "portal", revoked: true },
    });
    expect((await call("GET", "/v1/namespaces/default/agents", undefined, secret)).status).toBe(401);
    expect((await json(call("DELETE", "/v1/tokens/portal"))).body.code).toBe("NOT_FOUND");
  });

  it("keeps only a hash: the database file never holds the secret", async () => {
    const created = await json(call("POST", "/v1/tokens", { name: "portal", scopes: ["admin"] }));
    const { readFileSync, readdirSync } = await import("node:fs");
    const files = readdirSync(t.dataDir).filter((f) => f.startsWith("agent-sessions.db"));
    expect(files.length).toBeGreaterThan(0);
    for (const f of files)
      expect(readFileSync(`${t.dataDir}/${f}`).includes(Buffer.from(created.body.token))).toBe(false);
  });

  it("gives a session-only token 1 h unless told, and honours a ttl", async () => {
    await harnessSession("s");
    const chat = await json(call("POST", "/v1/tokens", { name: "chat", scopes: ["session:default/s:chat"] }));
    expect(Date.parse(chat.body.expiresAt) - Date.parse(chat.body.createdAt)).toBe(3_600_000);
    const short = await json(call("POST", "/v1/tokens", { name: "short", scopes: ["admin"], ttl: "15m" }));
    expect(Date.parse(short.body.expiresAt) - Date.parse(short.body.createdAt)).toBe(900_000);
  });

  it("refuses a second token of one name and bad scopes, naming the field", async () => {
    await call("POST", "/v1/tokens", { name: "portal", scopes: ["admin"] });
    expect((await json(call("POST", "/v1/tokens", { name: "portal", scopes: ["admin"] }))).body.code).toBe(
      "ALREADY_EXISTS",
    );
    const bad = await json(call("POST", "/v1/tokens", { name: "x", scopes: ["namespace:default:root"] }));
    expect(bad.status).toBe(400);
    expect(bad.body.message).toContain("namespace:<ns>:edit");
  });

  it("lets only admin mint tokens: a namespace token cannot mint itself more", async () => {
    const edit = await json(call("POST", "/v1/tokens", { name: "edit", scopes: ["namespace:default:edit"] }));
    const escalation = await json(
      call("POST", "/v1/tokens", { name: "mine", scopes: ["admin"] }, edit.body.token as string),
    );
    expect(escalation.status).toBe(403);
    expect((await json(call("GET", "/v1/tokens"))).body.items.map((i: Json) => i.name)).toEqual(["edit"]);
  });
});

describe("Agent credentials are write-only", () => {
  const PLANTED = "sk-planted-value-0123456789";
  const agent = {
    apiVersion: "agent-sessions.dev/v1alpha1",
    kind: "Agent",
    metadata: { name: "carol" },
    spec: {
      runtimeRef: "reference",
      credentials: [
        { name: "OPENAI_API_KEY", value: PLANTED },
        { name: "OTHER_KEY", secretRef: { env: "OTHER_KEY" } },
      ],
    },
  };

  it("never answers a literal value: PUT, GET, list and DELETE say valueSet instead", async () => {
    const answers = [
      await call("PUT", "/v1/namespaces/default/agents/carol", agent),
      await call("PUT", "/v1/namespaces/default/agents/carol", agent),
      await call("GET", "/v1/namespaces/default/agents/carol"),
      await call("GET", "/v1/namespaces/default/agents"),
      await call("DELETE", "/v1/namespaces/default/agents/carol"),
    ];
    expect(answers.map((a) => a.status)).toEqual([201, 200, 200, 200, 200]);
    for (const a of answers) expect(a.text).not.toContain(PLANTED);
    expect(JSON.parse(answers[2]?.text ?? "").spec.credentials).toEqual([
      { name: "OPENAI_API_KEY", valueSet: true },
      { name: "OTHER_KEY", secretRef: { env: "OTHER_KEY" } },
    ]);
  });

  it("keeps the stored value when a GET document is PUT back (valueSet: true), and hands it on", async () => {
    expect((await call("PUT", "/v1/namespaces/default/agents/carol", agent)).status).toBe(201);
    const read = await json(call("GET", "/v1/namespaces/default/agents/carol"));
    // The client edits something else and writes the document back as it read it.
    const edited = {
      ...read.body,
      spec: { ...read.body.spec, egress: [{ cidr: "10.213.0.1/32", port: 443 }] },
    };
    const written = await call("PUT", "/v1/namespaces/default/agents/carol", edited);
    expect(written.status, written.text).toBe(200);
    expect(written.text).not.toContain(PLANTED);
    expect(JSON.parse(written.text).spec.credentials).toEqual(read.body.spec.credentials);
    // The value is still the planted one: only the literal credential, so provisioning hands it on.
    const literalOnly = {
      ...edited,
      spec: { ...edited.spec, credentials: [{ name: "OPENAI_API_KEY", valueSet: true }] },
    };
    expect((await call("PUT", "/v1/namespaces/default/agents/carol", literalOnly)).status).toBe(200);
    const runner = await t.runner();
    expect((await call("POST", "/v1/rpc/ProvisionAgentWorkspace", { agent_ref: "carol" })).status).toBe(200);
    expect(JSON.stringify(runner.commands.find((c) => c.kind === "provision"))).toContain(PLANTED);
  });

  it("refuses valueSet where nothing is stored, and a credential with no source, saying why", async () => {
    const fresh = {
      ...agent,
      metadata: { name: "dave" },
      spec: { ...agent.spec, credentials: [{ name: "KEY", valueSet: true }] },
    };
    const unset = await json(call("PUT", "/v1/namespaces/default/agents/dave", fresh));
    expect(unset).toMatchObject({
      status: 400,
      body: {
        code: "INVALID_ARGUMENT",
        message:
          "invalid Agent: credential KEY says valueSet: true, but Agent default/dave has no value stored under that name; send its value or a secretRef",
      },
    });
    // Stored under another name is not stored under this one.
    expect((await call("PUT", "/v1/namespaces/default/agents/carol", agent)).status).toBe(201);
    const renamed = {
      ...agent,
      spec: { ...agent.spec, credentials: [{ name: "RENAMED_KEY", valueSet: true }] },
    };
    expect((await json(call("PUT", "/v1/namespaces/default/agents/carol", renamed))).status).toBe(400);
    const bare = { ...agent, spec: { ...agent.spec, credentials: [{ name: "OPENAI_API_KEY" }] } };
    const none = await json(call("PUT", "/v1/namespaces/default/agents/carol", bare));
    expect(none.status).toBe(400);
    expect(none.body.code).toBe("INVALID_ARGUMENT");
    expect(none.body.message).toContain("exactly one of value, secretRef or valueSet: true");
    const both = {
      ...agent,
      spec: { ...agent.spec, credentials: [{ name: "OPENAI_API_KEY", value: "x", valueSet: true }] },
    };
    expect((await json(call("PUT", "/v1/namespaces/default/agents/carol", both))).status).toBe(400);
    // Nothing refused was stored: carol still has her planted value and her secretRef.
    const kept = await json(call("GET", "/v1/namespaces/default/agents/carol"));
    expect(kept.body.spec.credentials).toEqual([
      { name: "OPENAI_API_KEY", valueSet: true },
      { name: "OTHER_KEY", secretRef: { env: "OTHER_KEY" } },
    ]);
  });

  it("still hands the stored value to the session it provisions", async () => {
    // Only the literal credential: a secretRef the server does not offer would refuse provisioning.
    const literalOnly = { ...agent, spec: { ...agent.spec, credentials: [agent.spec.credentials[0]] } };
    expect((await call("PUT", "/v1/namespaces/default/agents/carol", literalOnly)).status).toBe(201);
    const runner = await t.runner();
    const provisioned = await json(
      call("POST", "/v1/rpc/ProvisionAgentWorkspace", { agent_ref: "carol", client_request_id: "r1" }),
    );
    expect(provisioned.status).toBe(200);
    const provision = runner.commands.find((c) => c.kind === "provision");
    expect(JSON.stringify(provision)).toContain(PLANTED);
  });
});

describe("/v1/events with a scoped token", () => {
  async function token(name: string, scopes: string[]): Promise<string> {
    return (await json(call("POST", "/v1/tokens", { name, scopes }))).body.token as string;
  }
  async function session(agentRef: string, workstream: string): Promise<string> {
    const provisioned = await json(
      call("POST", "/v1/rpc/ProvisionAgentWorkspace", { agent_ref: agentRef, workstream }),
    );
    const started = await json(
      call("POST", "/v1/rpc/StartAgentSession", { container_name: provisioned.body.container_name }),
    );
    return started.body.session_id as string;
  }
  const open = (query: string, secret: string) =>
    SseClient.open(`${t.server.url}/v1/events${query}`, { authorization: `Bearer ${secret}` });

  /** The stream ends by itself, its last event saying why: UNAUTHENTICATED. */
  async function endsUnauthenticated(stream: SseClient): Promise<void> {
    await until("the stream to end", () => (stream.done ? true : undefined), 5_000);
    const last = stream.events.at(-1);
    expect(last?.event).toBe("error");
    expect(JSON.parse(last?.data ?? "{}")).toMatchObject({ code: "UNAUTHENTICATED" });
  }

  it("ends an open stream when its token is revoked, delivering nothing after", async () => {
    const runner = await t.runner();
    const id = await session("alice", "main");
    const stream = await open(`?session_id=${id}`, await token("watcher", ["namespace:default:view"]));
    expect(stream.status).toBe(200);
    runner.frame(id, { type: "log", payload: { before: true } });
    await stream.until((e) => e.some((x) => x.data.includes('"before"')));
    expect((await call("DELETE", "/v1/tokens/watcher")).status).toBe(200);
    await endsUnauthenticated(stream);
    runner.frame(id, { type: "log", payload: { after: true } });
    await new Promise((r) => setTimeout(r, 100));
    expect(stream.events.some((x) => x.data.includes('"after"'))).toBe(false);
  });

  it("bounds one token's open streams and all tokens' together; the admin is never locked out by them", async () => {
    const bounded = await startTestServer({ maxEventSubscribers: 3, eventSubscribersPerTokenMax: 2 });
    try {
      const mint = async (name: string) => {
        const reply = await fetch(`${bounded.server.url}/v1/tokens`, {
          method: "POST",
          headers: { authorization: `Bearer ${ADMIN_TOKEN}`, "content-type": "application/json" },
          body: JSON.stringify({ name, scopes: ["namespace:default:view"] }),
        });
        return ((await reply.json()) as { token: string }).token;
      };
      const openAs = (secret: string) =>
        SseClient.open(`${bounded.server.url}/v1/events`, { authorization: `Bearer ${secret}` });
      const [a, b, c] = [await mint("a"), await mint("b"), await mint("c")];
      const streams = [await openAs(a), await openAs(a)];
      const third = await openAs(a);
      expect(third.status).toBe(429);
      expect(third.events[0]?.data).toContain("AGENT_SESSIONS_EVENT_SUBSCRIBERS_PER_TOKEN_MAX");
      streams.push(await openAs(b));
      const full = await openAs(c);
      expect(full.status).toBe(429);
      expect(full.events[0]?.data).toContain("AGENT_SESSIONS_EVENT_SUBSCRIBERS_MAX");
      const admin = [await openAs(ADMIN_TOKEN), await openAs(ADMIN_TOKEN), await openAs(ADMIN_TOKEN)];
      expect(admin.map((s) => s.status)).toEqual([200, 200, 200]);
      expect(streams.map((s) => s.status)).toEqual([200, 200, 200]);
      for (const s of [...streams, ...admin]) s.close();
    } finally {
      await bounded.close();
    }
  });

  it("bounds the open streams of one namespace's tokens together, naming the namespace; another namespace and the admin are not held back, and a closed stream gives its slot back", async () => {
    const bounded = await startTestServer({ eventSubscribersPerNamespaceMax: 2 });
    try {
      const as = async (method: string, path: string, body: unknown) => {
        const reply = await fetch(`${bounded.server.url}${path}`, {
          method,
          headers: { authorization: `Bearer ${ADMIN_TOKEN}`, "content-type": "application/json" },
          body: JSON.stringify(body),
        });
        return { status: reply.status, body: (await reply.json()) as Json };
      };
      // A chat token is bound to a session that exists: a stopped one will do.
      const s = await as("PUT", "/v1/namespaces/default/harnesssessions/s", {
        apiVersion: "agent-sessions.dev/v1alpha1",
        kind: "HarnessSession",
        metadata: { name: "s" },
        spec: { agentRef: "alice", runtimeRef: "reference", desiredState: "stopped" },
      });
      expect(s.status).toBe(201);
      const mint = async (name: string, scopes: string[]) =>
        (await as("POST", "/v1/tokens", { name, scopes })).body.token as string;
      const viewer = await mint("viewer", ["namespace:default:view"]);
      const chat = await mint("chat", ["session:default/s:chat"]);
      const elsewhere = await mint("elsewhere", ["namespace:team-b:view"]);
      const openAs = (secret: string) =>
        SseClient.open(`${bounded.server.url}/v1/events`, { authorization: `Bearer ${secret}` });

      // Two tokens of one namespace, one stream each (neither near its own bound of 16).
      const held = [await openAs(viewer), await openAs(chat)];
      expect(held.map((x) => x.status)).toEqual([200, 200]);
      const over = await openAs(viewer);
      expect(over.status).toBe(429);
      const error = JSON.parse(over.events[0]?.data ?? "{}");
      expect(error.code).toBe("RESOURCE_EXHAUSTED");
      expect(error.message).toContain("namespace default");
      expect(error.message).toContain("AGENT_SESSIONS_EVENT_SUBSCRIBERS_PER_NAMESPACE_MAX");
      const others = [await openAs(elsewhere), await openAs(elsewhere), await openAs(ADMIN_TOKEN)];
      expect(others.map((x) => x.status)).toEqual([200, 200, 200]);

      held[0]?.close();
      const again = await until("the closed stream's slot to come back", async () => {
        const next = await openAs(chat);
        if (next.status === 200) return next;
        next.close();
        return undefined;
      });
      for (const x of [...held, ...others, again]) x.close();
    } finally {
      await bounded.close();
    }
  });

  it("ends an open stream when its token expires", async () => {
    const secret = (
      await json(call("POST", "/v1/tokens", { name: "brief", scopes: ["namespace:default:view"], ttl: "1s" }))
    ).body.token as string;
    const stream = await open("", secret);
    expect(stream.status).toBe(200);
    await endsUnauthenticated(stream);
  });

  it("delivers a namespace token its namespace's frames; a session token none of an RPC workspace named harness-<name>", async () => {
    await call("PUT", "/v1/namespaces/team-b/agentruntimes/reference", {
      apiVersion: "agent-sessions.dev/v1alpha1",
      kind: "AgentRuntime",
      metadata: { name: "reference" },
      spec: { image: TEST_IMAGE, contract: "v1alpha2" },
    });
    const bob = await call("PUT", "/v1/namespaces/team-b/agents/bob", {
      apiVersion: "agent-sessions.dev/v1alpha1",
      kind: "Agent",
      metadata: { name: "bob" },
      spec: { runtimeRef: "reference" },
    });
    expect(bob.status).toBe(201);
    const runner = await t.runner();
    const chatting = await session("alice", "harness-s");
    const other = await session("alice", "other");
    const foreign = await session("team-b/bob", "");

    // HarnessSession s is Dave's (stopped: no frames of its own): Alice's RPC workspace
    // `harness-s` below is not its workspace.
    const dave = await call("PUT", "/v1/namespaces/default/agents/dave", {
      apiVersion: "agent-sessions.dev/v1alpha1",
      kind: "Agent",
      metadata: { name: "dave" },
      spec: { runtimeRef: "reference" },
    });
    expect(dave.status).toBe(201);
    await harnessSession("s", "dave", "stopped");
    const namespace = await open("?last_event_id=0", await token("ns", ["namespace:default:view"]));
    const chat = await open("?last_event_id=0", await token("chat", ["session:default/s:chat"]));
    const admin = await open("?last_event_id=0", ADMIN_TOKEN);
    for (const id of [chatting, other, foreign]) runner.frame(id, { type: "log", payload: { id } });
    // Each session has its STARTING and READY frames before the log frame: 9 in all.
    await admin.until((e) => e.length >= 9);
    await namespace.until((e) => e.length >= 6);
    runner.frame(chatting, { type: "log", payload: { last: true } });
    await namespace.until((e) => e.length >= 7);
    await admin.until((e) => e.length >= 10);

    const sessions = (c: SseClient) => [...new Set(c.frames().map((f) => f.session_id))].sort();
    expect(sessions(admin)).toEqual([chatting, other, foreign].sort());
    expect(sessions(namespace)).toEqual([chatting, other].sort());
    // `harness-s` made over the RPCs serves no HarnessSession s (the RPC routes say 404 too):
    // a chat token sees a session's frames by its record (event-access.test.ts), never by name.
    expect(sessions(chat)).toEqual([]);
    for (const c of [namespace, chat, admin]) c.close();

    // Following another's session by id is the same 404 as a session that does not exist.
    const secret = await token("chat-2", ["session:default/s:chat"]);
    for (const id of [chatting, other, foreign, "no-such-session"]) {
      const refused = await open(`?session_id=${id}`, secret);
      expect(refused.status).toBe(404);
      expect(JSON.parse(refused.events[0]?.data ?? "{}")).toEqual({
        code: "NOT_FOUND",
        message: `session ${id} not found`,
      });
    }
  });
});
