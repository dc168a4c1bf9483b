import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import type { ResultRecord } from "../../contracts/adapter.ts";
import { RUNNER_PROTOCOL_VERSION, type RunnerCommand } from "../../contracts/runner-protocol.ts";
import type { FakeRunner, Reply } from "../testing/fake-runner.ts";
import { defaultHandler, provisioned } from "../testing/fake-runner.ts";
import { SqliteStore } from "../store/sqlite-store.ts";
import {
  ADMIN_TOKEN,
  RUNNER_TOKEN,
  startTestServer,
  TEST_IMAGE,
  type TestServer,
} from "../testing/test-server.ts";
import { until } from "../../test/support/until.ts";
import { readSse } from "../../client/sse.ts";

// biome-ignore lint/suspicious/noExplicitAny: JSON bodies of many shapes, read by assertions
type Json = any;

const DIGEST = TEST_IMAGE.split("@")[1] ?? "";
const BASE = "/v1/namespaces/default/harnesssessions";
const API = "agent-sessions.dev/v1alpha1";

type RelayCommand = Extract<RunnerCommand, { kind: "relay" }>;
/** What the fake runner does with a `relay` command; the default answers like the adapter. */
let onRelay: (command: RelayCommand, runner: FakeRunner) => Reply | Promise<Reply>;
let t: TestServer;
let runner: FakeRunner;

function result(id: string, over: Partial<ResultRecord> = {}): ResultRecord {
  return {
    id,
    outcome: "succeeded",
    output: `echo ${id}`,
    usage: { input_tokens: 3, output_tokens: 2 },
    started_at: new Date().toISOString(),
    finished_at: new Date().toISOString(),
    ...over,
  };
}

function chunk(runner: FakeRunner, relayId: string, data: string, done: boolean, status?: number): void {
  runner.send({
    version: RUNNER_PROTOCOL_VERSION,
    type: "relay_chunk",
    payload: { relay_id: relayId, data, done, ...(status !== undefined ? { status } : {}) },
  });
}

const answerWithResult = (command: RelayCommand, r: FakeRunner): Reply => {
  chunk(r, command.relay_id, JSON.stringify(result(command.request.id)), false, 200);
  chunk(r, command.relay_id, "", true);
  return { ok: true, result: { status: 200 } };
};

async function call(method: string, path: string, body?: unknown, init: RequestInit = {}) {
  const response = await fetch(`${t.server.url}${path}`, {
    method,
    headers: { authorization: `Bearer ${ADMIN_TOKEN}`, "content-type": "application/json" },
    ...(body !== undefined ? { body: typeof body === "string" ? body : JSON.stringify(body) } : {}),
    ...init,
  });
  const text = await response.text();
  let json: Json;
  try {
    json = JSON.parse(text);
  } catch {
    json = text;
  }
  return { status: response.status, body: json };
}

const manifest = (spec: Record<string, unknown>) => ({
  apiVersion: API,
  kind: "HarnessSession",
  metadata: { name: "chat" },
  spec: { agentRef: "alice", runtimeRef: "reference", ...spec },
});

async function phaseOf(name = "chat"): Promise<Json> {
  return (await call("GET", `${BASE}/${name}`)).body;
}

async function readyChat(spec: Record<string, unknown> = {}): Promise<Json> {
  const created = await call("PUT", `${BASE}/chat`, manifest(spec));
  expect(created.status).toBe(201);
  return until("Ready", async () => {
    const s = await phaseOf();
    return s.status.phase === "Ready" ? s : undefined;
  });
}

beforeEach(async () => {
  t = await startTestServer({
    requestTimeoutMs: 1_500,
    requestBodyMaxBytes: 2_048,
    replyMaxBytes: 4_096,
    idleCheckMs: 100,
    requestsPerTokenMax: 2,
    requestsPerNamespaceMax: 3,
  });
  onRelay = answerWithResult;
  runner = await t.runner({
    handler: (command) => {
      switch (command.kind) {
        case "provision":
          return provisioned(command, DIGEST);
        case "relay":
          return onRelay(command, runner);
        case "run_once":
          return {
            ok: true,
            result: {
              exit_code: 0,
              output: `starting\n${JSON.stringify(result("one-shot", { output: `ran: ${command.input}` }))}\n`,
              timed_out: false,
              resolved_image_digest: DIGEST,
            },
          };
        default:
          return defaultHandler(command);
      }
    },
  });
});
afterEach(async () => {
  await t.close();
});

describe("HarnessSession resource", () => {
  it("is created Pending and reconciled to Ready with the digest the runner resolved", async () => {
    const created = await call("PUT", `${BASE}/chat`, manifest({}));
    expect(created.status).toBe(201);
    expect(created.body).toMatchObject({
      kind: "HarnessSession",
      metadata: { name: "chat", namespace: "default", generation: 1 },
      spec: { desiredState: "running", idleTimeout: "15m" },
      status: { phase: "Pending", requestCount: 0 },
    });
    const ready = await until("Ready", async () => {
      const s = await phaseOf();
      return s.status.phase === "Ready" ? s : undefined;
    });
    expect(ready.status).toMatchObject({
      observedGeneration: 1,
      resolvedImageDigest: DIGEST,
      conditions: [{ type: "Ready", status: "True", reason: "SessionReady" }],
    });
    expect(ready.status.sessionId).toMatch(/^ses-/);
    // Provisioned and started once; Ready only after a probe reached the adapter (a second probe
    // may follow when the controller reconciles again before it reads the first one's answer).
    const kinds = runner.commands.map((c) => c.kind);
    expect(kinds.filter((k) => k !== "probe")).toEqual(["provision", "start"]);
    expect(kinds.slice(0, 3)).toEqual(["provision", "start", "probe"]);
    const list = await call("GET", BASE);
    expect(list.body).toMatchObject({ kind: "HarnessSessionList", items: [{ metadata: { name: "chat" } }] });
  });

  it("keeps agentRef and runtimeRef immutable and patches the rest by JSON merge patch", async () => {
    await readyChat();
    const moved = await call("PUT", `${BASE}/chat`, manifest({ runtimeRef: "other" }));
    expect(moved.status).toBe(400);
    expect(moved.body).toMatchObject({
      code: "INVALID_ARGUMENT",
      details: { field_violations: [{ field: "spec.runtimeRef", description: "field is immutable" }] },
    });
    const renamed = await call("PATCH", `${BASE}/chat`, { spec: { agentRef: "bob" } });
    expect(renamed.status).toBe(400);
    expect(renamed.body.message).toMatch(/spec.agentRef is immutable/);
    const bad = await call("PATCH", `${BASE}/chat`, { spec: { idleTimeout: "soon" } });
    expect(bad.status).toBe(400);
    const patched = await call("PATCH", `${BASE}/chat`, {
      spec: { idleTimeout: "1h" },
      status: { phase: "Failed" },
    });
    expect(patched.status).toBe(200);
    expect(patched.body).toMatchObject({
      metadata: { generation: 2 },
      spec: { agentRef: "alice", runtimeRef: "reference", desiredState: "running", idleTimeout: "1h" },
      status: { phase: "Ready" },
    });
    expect((await call("PATCH", `${BASE}/nope`, { spec: {} })).status).toBe(404);
  });

  it("shows its Pulumi stack in status.stackName: <namespace>--<workspace name>, as the runner names the stack", async () => {
    const ready = await readyChat();
    const [provision] = runner.commandsOf("provision");
    expect(ready.status.stackName).toBe(`${provision?.spec.namespace}--${provision?.spec.name}`);
    expect(ready.status.stackName).toMatch(/^default--alice-harness-chat-[0-9a-f]{8}$/);
    const listed = await call("GET", BASE);
    expect(listed.body.items[0].status.stackName).toBe(ready.status.stackName);
  });

  it("heals a session applied before its Agent: Failed (Invalid) until the Agent is created, then Ready without a new spec", async () => {
    const early = await call("PUT", `${BASE}/early`, {
      ...manifest({}),
      metadata: { name: "early" },
      spec: { agentRef: "bob", runtimeRef: "reference" },
    });
    expect(early.status).toBe(201);
    const failed = await until("Failed", async () => {
      const s = await phaseOf("early");
      return s.status.phase === "Failed" ? s : undefined;
    });
    expect(failed.status.conditions).toEqual(
      expect.arrayContaining([expect.objectContaining({ type: "Ready", reason: "Invalid" })]),
    );
    const agent = await call("PUT", "/v1/namespaces/default/agents/bob", {
      apiVersion: API,
      kind: "Agent",
      metadata: { name: "bob" },
      spec: { runtimeRef: "reference" },
    });
    expect(agent.status).toBe(201);
    const ready = await until("Ready after the Agent appeared", async () => {
      const s = await phaseOf("early");
      return s.status.phase === "Ready" ? s : undefined;
    });
    expect(ready.metadata.generation).toBe(failed.metadata.generation);
  });

  it("creates only with If-None-Match: *: an existing name is 409 ALREADY_EXISTS and nothing about it changes", async () => {
    const first = await call(
      "PUT",
      `${BASE}/chat`,
      manifest({ desiredState: "stopped", autoResume: true, idleTimeout: "1h" }),
      {
        headers: { authorization: `Bearer ${ADMIN_TOKEN}`, "if-none-match": "*" },
      },
    );
    expect(first.status).toBe(201);
    const before = await phaseOf();
    const again = await call("PUT", `${BASE}/chat`, manifest({}), {
      headers: { authorization: `Bearer ${ADMIN_TOKEN}`, "if-none-match": "*" },
    });
    expect(again.status).toBe(409);
    expect(again.body).toMatchObject({ code: "ALREADY_EXISTS" });
    expect(again.body.message).toContain("default/chat");
    const after = await phaseOf();
    expect(after.metadata.generation).toBe(before.metadata.generation);
    expect(after.spec).toEqual(before.spec);
    const etag = await call("PUT", `${BASE}/other`, manifest({}), {
      headers: { authorization: `Bearer ${ADMIN_TOKEN}`, "if-none-match": '"v1"' },
    });
    expect(etag.status).toBe(400);
    expect(etag.body.message).toContain("If-None-Match (header)");
    expect((await call("GET", `${BASE}/other`)).status).toBe(404);
  });

  it("refuses at PUT a runtimeRef other than its Agent's with 400, naming both runtimes, and stores nothing", async () => {
    const refused = await call("PUT", `${BASE}/chat`, manifest({ runtimeRef: "other" }));
    expect(refused.status).toBe(400);
    expect(refused.body).toMatchObject({
      code: "INVALID_ARGUMENT",
      details: { field_violations: [{ field: "spec.runtimeRef" }] },
    });
    expect(refused.body.message).toContain("other");
    expect(refused.body.message).toContain("reference");
    expect((await call("GET", `${BASE}/chat`)).status).toBe(404);
    expect(runner.commandsOf("provision")).toEqual([]);
  });

  it("refuses at PUT a repository outside the Agent's egress as the RPC path does (412 RepoNotInEgress), storing nothing", async () => {
    const repo = { url: "http://10.9.9.9:8080/team/app.git" };
    const rpc = await t.rpc("ProvisionAgentWorkspace", {
      agent_ref: "alice",
      workstream: { name: "main", repo },
      client_request_id: "repo-1",
    });
    const refused = await call("PUT", `${BASE}/chat`, manifest({ workspace: { repo } }));
    expect(rpc.status).toBe(412);
    expect(refused.status).toBe(rpc.status);
    expect(refused.body).toMatchObject({
      code: "FAILED_PRECONDITION",
      details: { reason: "RepoNotInEgress", field: "spec.workspace.repo.url" },
    });
    expect(refused.body.message).toBe(rpc.body.message);
    expect((await call("GET", `${BASE}/chat`)).status).toBe(404);
    expect(runner.commandsOf("provision")).toEqual([]);
  });

  it("fails a binding to a v1alpha1 runtime with reason Invalid and provisions nothing", async () => {
    await call("PUT", "/v1/namespaces/default/agentruntimes/legacy", {
      apiVersion: API,
      kind: "AgentRuntime",
      metadata: { name: "legacy" },
      spec: { image: TEST_IMAGE, contract: "v1alpha1", approved: true },
    });
    await call("PUT", "/v1/namespaces/default/agents/bob", {
      apiVersion: API,
      kind: "Agent",
      metadata: { name: "bob" },
      spec: { runtimeRef: "legacy" },
    });
    await call("PUT", `${BASE}/old`, {
      ...manifest({ agentRef: "bob", runtimeRef: "legacy" }),
      metadata: { name: "old" },
    });
    const failed = await until("Failed", async () => {
      const s = await phaseOf("old");
      return s.status.phase === "Failed" ? s : undefined;
    });
    expect(failed.status.conditions[0]).toMatchObject({ type: "Ready", status: "False", reason: "Invalid" });
    expect(failed.status.conditions[0].message).toMatch(/v1alpha1.*v1alpha2/);
    expect(runner.commands).toEqual([]);
  });

  it("restarts a session whose workload exited (Pending, Restarting), saying why in lastExit", async () => {
    const ready = await readyChat();
    runner.state(ready.status.sessionId, "ERRORED", "ContainerExited");
    const restarting = await until("Restarting", async () => {
      const s = await phaseOf();
      return s.status.conditions[0].reason === "Restarting" ? s : undefined;
    });
    expect(restarting.status).toMatchObject({
      phase: "Pending",
      restartCount: 1,
      lastExit: { reason: "ContainerExited" },
    });
    expect(restarting.status.conditions[0]).toMatchObject({ status: "False", reason: "Restarting" });
  });

  it("DELETE destroys the workspace (runner remove) and forgets the session", async () => {
    await readyChat();
    const deleted = await call("DELETE", `${BASE}/chat`);
    expect(deleted.status).toBe(200);
    expect(deleted.body.metadata.deletionTimestamp).toBeDefined();
    expect(runner.commandsOf("remove")).toHaveLength(1);
    expect((await call("GET", `${BASE}/chat`)).status).toBe(404);
  });
});

describe("request proxy", () => {
  it("relays a request to the session's runner and accounts for it", async () => {
    const ready = await readyChat();
    const reply = await call("POST", `${BASE}/chat/requests`, { input: "hello", id: "r-1" });
    expect(reply.status).toBe(200);
    expect(reply.body).toMatchObject({
      id: "r-1",
      outcome: "succeeded",
      usage: { input_tokens: 3, output_tokens: 2 },
    });
    const [relayed] = runner.commandsOf("relay");
    expect(relayed).toMatchObject({
      container_name: ready.status.containerName,
      request: { id: "r-1", input: "hello", stream: false },
    });
    const s = await phaseOf();
    expect(s.status).toMatchObject({
      requestCount: 1,
      activeRequests: 0,
      lastRequestId: "r-1",
      lastRequestOutcome: "succeeded",
      // No gateway report came: the adapter's numbers are only its claim.
      claimedUsage: { inputTokens: 3, outputTokens: 2, reportedRequests: 1, unavailableRequests: 0 },
      usage: { inputTokens: 0, outputTokens: 0, reportedRequests: 0, unavailableRequests: 0 },
    });
    expect(s.status.usage).not.toHaveProperty("source");
    expect(reply.body).not.toHaveProperty("claimed_usage");
    const again = await call("POST", `${BASE}/chat/requests`, { input: "hello", id: "r-1" });
    expect(again.status).toBe(409);
  });

  it("passes a streamed reply through event by event", async () => {
    await readyChat();
    onRelay = async (command, r) => {
      const id = command.relay_id;
      chunk(r, id, 'data: {"type":"delta","text":"one "}\n\n', false, 200);
      await new Promise((resolve) => setTimeout(resolve, 300));
      chunk(r, id, 'data: {"type":"delta","text":"two"}\n\ndata: {"type":"res', false);
      chunk(r, id, `ult","result":${JSON.stringify(result(command.request.id))}}\n\n`, false);
      chunk(r, id, "", true);
      return { ok: true, result: { status: 200 } };
    };
    const started = Date.now();
    const response = await fetch(`${t.server.url}${BASE}/chat/requests`, {
      method: "POST",
      headers: { authorization: `Bearer ${ADMIN_TOKEN}`, "content-type": "application/json" },
      body: JSON.stringify({ input: "count", stream: true }),
    });
    expect(response.headers.get("content-type")).toMatch(/text\/event-stream/);
    const arrivals: { event: string; at: number; data: Json }[] = [];
    if (!response.body) throw new Error("no body");
    for await (const { event, data } of readSse(response.body))
      arrivals.push({ event, at: Date.now() - started, data: JSON.parse(data) });
    expect(arrivals.map((a) => a.event)).toEqual(["delta", "delta", "result"]);
    expect(arrivals[0]?.data).toEqual({ type: "delta", text: "one " });
    // The first delta was passed on before the rest existed.
    expect((arrivals[1]?.at ?? 0) - (arrivals[0]?.at ?? 0)).toBeGreaterThan(200);
    expect((await phaseOf()).status).toMatchObject({ requestCount: 1, lastRequestOutcome: "succeeded" });
  });

  it("refuses an oversized body with 413 RESOURCE_EXHAUSTED and counts nothing", async () => {
    await readyChat();
    const reply = await call("POST", `${BASE}/chat/requests`, { input: "x".repeat(4_000) });
    expect(reply.status).toBe(413);
    expect(reply.body).toMatchObject({ code: "RESOURCE_EXHAUSTED" });
    expect(reply.body.message).toMatch(/2048 bytes/);
    expect(runner.commandsOf("relay")).toEqual([]);
    expect((await phaseOf()).status.requestCount).toBe(0);
  });

  it("ends a request past its deadline with 504 DEADLINE_EXCEEDED and cancels it upstream", async () => {
    await readyChat();
    onRelay = () => "no-reply";
    const reply = await call("POST", `${BASE}/chat/requests`, { input: "slow", id: "late" });
    expect(reply.status).toBe(504);
    expect(reply.body.code).toBe("DEADLINE_EXCEEDED");
    await runner.until(() => runner.commandsOf("cancel_relay").length === 1);
    expect(runner.commandsOf("cancel_relay")[0]).toMatchObject({ request_id: "late" });
    expect((await phaseOf()).status).toMatchObject({
      activeRequests: 0,
      errorCount: 1,
      lastRequestOutcome: "failed",
      lastRequestUsage: "unavailable",
    });
  });

  it("ends a reply larger than the bound and cancels it upstream", async () => {
    await readyChat();
    onRelay = (command, r) => {
      chunk(r, command.relay_id, "x".repeat(5_000), false, 200);
      return "no-reply";
    };
    const reply = await call("POST", `${BASE}/chat/requests`, { input: "big" });
    expect(reply.status).toBe(502);
    expect(reply.body).toMatchObject({ code: "RESOURCE_EXHAUSTED", details: { reason: "ReplyTooLarge" } });
    await runner.until(() => runner.commandsOf("cancel_relay").length === 1);
  });

  it("bounds an adapter's refusal of a streamed request: an endless HTTP 500 body ends RESOURCE_EXHAUSTED, counted as failed, activeRequests back to 0", async () => {
    await readyChat();
    onRelay = (command, r) => {
      // The adapter answers 500 and never stops writing its body (until cancelled).
      chunk(r, command.relay_id, "e".repeat(1_000), false, 500);
      for (let i = 0; i < 50; i++) chunk(r, command.relay_id, "e".repeat(1_000), false);
      return "no-reply";
    };
    const reply = await call("POST", `${BASE}/chat/requests`, { input: "err", id: "e-1", stream: true });
    expect(reply.status).toBe(502);
    expect(reply.body).toMatchObject({ code: "RESOURCE_EXHAUSTED", details: { limit_bytes: 4_096 } });
    expect(reply.body.message).toMatch(/reply exceeds 4096 bytes/);
    await runner.until(() => runner.commandsOf("cancel_relay").length === 1);
    expect(runner.commandsOf("relay")[0]?.reply_max_bytes).toBe(4_096);
    expect((await phaseOf()).status).toMatchObject({
      requestCount: 1,
      activeRequests: 0,
      errorCount: 1,
      lastRequestId: "e-1",
      lastRequestOutcome: "failed",
    });
  });

  it("answers an adapter's short refusal of a streamed request with its own code", async () => {
    await readyChat();
    onRelay = (command, r) => {
      chunk(r, command.relay_id, '{"code":"INVALID_ARGUMENT","message":"no such tool"}', false, 400);
      chunk(r, command.relay_id, "", true);
      return { ok: true, result: { status: 400 } };
    };
    const reply = await call("POST", `${BASE}/chat/requests`, { input: "x", stream: true });
    expect(reply.status).toBe(400);
    expect(reply.body).toMatchObject({ code: "INVALID_ARGUMENT" });
    expect((await phaseOf()).status).toMatchObject({ activeRequests: 0, lastRequestOutcome: "failed" });
  });

  it("a client that goes away cancels the request upstream; the outcome is cancelled", async () => {
    await readyChat();
    onRelay = (command, r) => {
      chunk(r, command.relay_id, 'data: {"type":"delta","text":"a"}\n\n', false, 200);
      return "no-reply";
    };
    const controller = new AbortController();
    const response = await fetch(`${t.server.url}${BASE}/chat/requests`, {
      method: "POST",
      headers: { authorization: `Bearer ${ADMIN_TOKEN}`, "content-type": "application/json" },
      body: JSON.stringify({ input: "long", stream: true, id: "gone" }),
      signal: controller.signal,
    });
    const reader = (response.body as ReadableStream<Uint8Array>).getReader();
    await reader.read(); // the first delta
    controller.abort();
    await runner.until(() => runner.commandsOf("cancel_relay").length === 1);
    const s = await until("settled", async () => {
      const x = await phaseOf();
      return x.status.activeRequests === 0 ? x : undefined;
    });
    expect(s.status).toMatchObject({ lastRequestId: "gone", lastRequestOutcome: "cancelled", errorCount: 0 });
  });

  it("bounds one token's requests in flight (429 RESOURCE_EXHAUSTED, nothing counted); the admin is never refused for it", async () => {
    await readyChat();
    onRelay = () => "no-reply";
    const created = await call("POST", "/v1/tokens", {
      name: "chatter",
      scopes: ["session:default/chat:chat"],
    });
    const chat = created.body.token as string;
    const as = (token: string, id: string) =>
      call(
        "POST",
        `${BASE}/chat/requests`,
        { input: "x", id },
        { headers: { authorization: `Bearer ${token}`, "content-type": "application/json" } },
      );
    const held = [as(chat, "h-1"), as(chat, "h-2")];
    await runner.until(() => runner.commandsOf("relay").length === 2);
    const over = await as(chat, "h-3");
    expect(over.status).toBe(429);
    expect(over.body.code).toBe("RESOURCE_EXHAUSTED");
    expect(over.body.message).toContain("AGENT_SESSIONS_REQUESTS_PER_TOKEN_MAX");
    expect((await phaseOf()).status.requestCount).toBe(2);
    // The admin's request is admitted (and, with no reply, ends at the deadline).
    expect((await as(ADMIN_TOKEN, "a-1")).status).toBe(504);
    expect((await Promise.all(held)).map((r) => r.status)).toEqual([504, 504]);
    onRelay = answerWithResult;
    expect((await as(chat, "h-4")).status).toBe(200);
  });

  it("bounds the requests in flight to one namespace's sessions, whichever tokens sent them (429 naming the namespace); another namespace is not held back, and an ended request gives its slot back", async () => {
    await readyChat();
    // The same session in namespace team-b: its runtime and Agent first.
    await call("PUT", "/v1/namespaces/team-b/agentruntimes/reference", {
      apiVersion: API,
      kind: "AgentRuntime",
      metadata: { name: "reference" },
      spec: { image: TEST_IMAGE, contract: "v1alpha2" },
    });
    const alice = await call("PUT", "/v1/namespaces/team-b/agents/alice", {
      apiVersion: API,
      kind: "Agent",
      metadata: { name: "alice" },
      spec: { runtimeRef: "reference" },
    });
    expect(alice.status).toBe(201);
    const other = "/v1/namespaces/team-b/harnesssessions/chat";
    expect((await call("PUT", other, manifest({}))).status).toBe(201);
    await until("team-b Ready", async () => {
      const x = await call("GET", other);
      return x.body.status?.phase === "Ready" ? true : undefined;
    });
    onRelay = () => "no-reply";
    const mint = async (name: string, scopes: string[]) =>
      (await call("POST", "/v1/tokens", { name, scopes })).body.token as string;
    const chat = await mint("chatter", ["session:default/chat:chat"]);
    const editor = await mint("editor", ["namespace:default:edit"]);
    const tenantB = await mint("tenant-b", ["namespace:team-b:edit"]);
    const as = (token: string, id: string, path = `${BASE}/chat`) =>
      call(
        "POST",
        `${path}/requests`,
        { input: "x", id },
        { headers: { authorization: `Bearer ${token}`, "content-type": "application/json" } },
      );
    // Three in flight in default from two tokens, each under its own bound of 2.
    const held = [as(chat, "h-1"), as(chat, "h-2"), as(editor, "e-1")];
    await runner.until(() => runner.commandsOf("relay").length === 3);
    const over = await as(editor, "e-2");
    expect(over.status).toBe(429);
    expect(over.body.code).toBe("RESOURCE_EXHAUSTED");
    expect(over.body.message).toContain("namespace default");
    expect(over.body.message).toContain("AGENT_SESSIONS_REQUESTS_PER_NAMESPACE_MAX");
    expect((await phaseOf()).status.requestCount).toBe(3);
    onRelay = answerWithResult;
    expect((await as(tenantB, "b-1", other)).status).toBe(200);
    // The held ones end at the deadline; then the namespace has room again.
    expect((await Promise.all(held)).map((r) => r.status)).toEqual([504, 504, 504]);
    expect((await as(editor, "e-3")).status).toBe(200);
  });

  it("refuses a chat token (403 PERMISSION_DENIED) on a session re-created under its name: it is bound to the uid it was issued for", async () => {
    const first = await readyChat();
    const minted = await call("POST", "/v1/tokens", { name: "bound", scopes: ["session:default/chat:chat"] });
    expect(minted.status).toBe(201);
    const as = {
      headers: { authorization: `Bearer ${minted.body.token}`, "content-type": "application/json" },
    };
    expect((await call("POST", `${BASE}/chat/requests`, { input: "x", id: "b-1" }, as)).status).toBe(200);
    expect((await call("DELETE", `${BASE}/chat`)).status).toBe(200);
    await until("gone", async () => ((await call("GET", `${BASE}/chat`)).status === 404 ? true : undefined));
    const second = await readyChat();
    expect(second.metadata.uid).not.toBe(first.metadata.uid);
    for (const [method, path, body] of [
      ["POST", `${BASE}/chat/requests`, { input: "x", id: "b-2" }],
      ["GET", `${BASE}/chat`, undefined],
      ["GET", `${BASE}/chat/workspace/files`, undefined],
    ] as const) {
      const refused = await call(method, path, body, as);
      expect([method, path, refused.status, refused.body.code]).toEqual([
        method,
        path,
        403,
        "PERMISSION_DENIED",
      ]);
      expect(refused.body.message).toContain("re-created");
    }
    expect((await phaseOf()).status.requestCount).toBe(0);
    // Nor by its workspace's global name: as if there were none (rpc-access.ts).
    const byContainer = await call(
      "GET",
      `/v1/workspaces/${second.status.containerName}/workspace/files`,
      undefined,
      as,
    );
    expect([byContainer.status, byContainer.body.code]).toEqual([404, "NOT_FOUND"]);
    // A token issued for the new session works; one for a session that does not exist is not issued.
    const fresh = await call("POST", "/v1/tokens", { name: "fresh", scopes: ["session:default/chat:chat"] });
    const asFresh = {
      headers: { authorization: `Bearer ${fresh.body.token}`, "content-type": "application/json" },
    };
    expect((await call("POST", `${BASE}/chat/requests`, { input: "x", id: "b-3" }, asFresh)).status).toBe(
      200,
    );
    const none = await call("POST", "/v1/tokens", { name: "none", scopes: ["session:default/nobody:chat"] });
    expect([none.status, none.body.code]).toEqual([404, "NOT_FOUND"]);
  });

  it("cancels one request on the client's word: the outcome is cancelled", async () => {
    await readyChat();
    let relayId = "";
    onRelay = (command) => {
      relayId = command.relay_id;
      return "no-reply";
    };
    const pending = call("POST", `${BASE}/chat/requests`, { input: "long", id: "c-1" });
    await runner.until(() => relayId !== "");
    const cancel = await call("POST", `${BASE}/chat/requests/c-1/cancel`);
    expect(cancel).toMatchObject({ status: 202, body: { id: "c-1", cancelling: true } });
    const cancelRelay = runner.commandsOf("cancel_relay")[0];
    expect(cancelRelay).toMatchObject({ relay_id: relayId, request_id: "c-1" });
    // What the runner does on cancel_relay: the aborted relay fails.
    runner.send({
      version: RUNNER_PROTOCOL_VERSION,
      type: "result",
      payload: {
        command_id:
          (runner.received.find((m) => m.type === "command" && m.payload.command.kind === "relay") as Json)
            ?.payload.command_id ?? "",
        ok: false,
        error: { code: "INTERNAL", message: "cancelled" },
      },
    });
    const reply = await pending;
    expect(reply.status).toBe(499);
    expect((await phaseOf()).status).toMatchObject({ lastRequestOutcome: "cancelled", activeRequests: 0 });
    expect((await call("POST", `${BASE}/chat/requests/c-1/cancel`)).status).toBe(412);
    expect((await call("POST", `${BASE}/chat/requests/nope/cancel`)).status).toBe(404);
  });

  it("only Ready sessions accept requests: a stopped one is FAILED_PRECONDITION", async () => {
    await readyChat();
    await call("PATCH", `${BASE}/chat`, { spec: { desiredState: "stopped" } });
    const stopped = await until("Stopped", async () => {
      const s = await phaseOf();
      return s.status.phase === "Stopped" ? s : undefined;
    });
    expect(stopped.status.conditions[0]).toMatchObject({ status: "False", reason: "Stopped" });
    expect(runner.commandsOf("stop")).toHaveLength(1);
    expect(runner.commandsOf("scale_down")).toHaveLength(1);
    const refused = await call("POST", `${BASE}/chat/requests`, { input: "hi" });
    expect(refused.status).toBe(412);
    expect(refused.body).toMatchObject({
      code: "FAILED_PRECONDITION",
      details: { phase: "Stopped", reason: "Stopped" },
    });
  });
});

describe("auth matrix", () => {
  it("refuses no token, a runner token, a session's adapter token and the wrong namespace, changing nothing", async () => {
    await readyChat();
    const store = new SqliteStore(join(t.dataDir, "agent-sessions.db"));
    const adapterToken = (await store.listWorkspaces())[0]?.adapter_token ?? "";
    await store.close();
    expect(adapterToken.length).toBeGreaterThan(16);
    const post = (path: string, token?: string) =>
      fetch(`${t.server.url}${path}`, {
        method: "POST",
        headers: {
          "content-type": "application/json",
          ...(token ? { authorization: `Bearer ${token}` } : {}),
        },
        body: JSON.stringify({ input: "hi" }),
      });
    expect((await post(`${BASE}/chat/requests`)).status).toBe(401);
    expect((await post(`${BASE}/chat/requests`, RUNNER_TOKEN)).status).toBe(403);
    expect((await post(`${BASE}/chat/requests`, adapterToken)).status).toBe(401);
    const elsewhere = await call("POST", "/v1/namespaces/other/harnesssessions/chat/requests", {
      input: "hi",
    });
    expect(elsewhere.status).toBe(404);
    expect(runner.commandsOf("relay")).toEqual([]);
    expect((await phaseOf()).status).toMatchObject({ requestCount: 0, activeRequests: 0 });
  });
});

describe("idle controller", () => {
  it("stops an idle session (Ready=False IdleTimeout, scaled down) and a spec write resumes it", async () => {
    const ready = await readyChat({ idleTimeout: "1s" });
    const idle = await until(
      "IdleTimeout",
      async () => {
        const s = await phaseOf();
        return s.status.phase === "Stopped" ? s : undefined;
      },
      10_000,
    );
    expect(idle.status.conditions[0]).toMatchObject({ status: "False", reason: "IdleTimeout" });
    expect(runner.commandsOf("scale_down")).toHaveLength(1);
    // Settled: it stays stopped (the controller never resumes behind the user's back).
    await new Promise((r) => setTimeout(r, 500));
    expect((await phaseOf()).status.phase).toBe("Stopped");

    const patchedAt = new Date().toISOString();
    await call("PATCH", `${BASE}/chat`, { spec: { desiredState: "running", idleTimeout: "1h" } });
    const resumed = await until("Ready again", async () => {
      const s = await phaseOf();
      return s.status.phase === "Ready" ? s : undefined;
    });
    expect(resumed.status.sessionId).toBe(ready.status.sessionId);
    expect(resumed.status.lastActivityTime >= patchedAt).toBe(true);
    expect(runner.commandsOf("provision")).toHaveLength(2);
    expect(runner.commandsOf("start").map((c) => c.resume)).toEqual([false, true]);
  });
});

describe("one-shot AgentRuns", () => {
  it("run a v1alpha1 runtime to completion and refuse a session runtime", async () => {
    await call("PUT", "/v1/namespaces/default/agentruntimes/legacy", {
      apiVersion: API,
      kind: "AgentRuntime",
      metadata: { name: "legacy" },
      spec: { image: TEST_IMAGE, contract: "v1alpha1", approved: true, command: ["/bin/node", "/app/x.ts"] },
    });
    await call("PUT", "/v1/namespaces/default/agents/bob", {
      apiVersion: API,
      kind: "Agent",
      metadata: { name: "bob" },
      spec: { runtimeRef: "legacy", credentials: [{ name: "MODEL_API_KEY", value: "sk-x" }] },
    });
    const run = await call("POST", "/v1/namespaces/default/agentruns", {
      apiVersion: API,
      kind: "AgentRun",
      metadata: { name: "first" },
      spec: { agentRef: "bob", input: "hi" },
    });
    expect(run.status).toBe(201);
    expect(run.body).toMatchObject({
      metadata: { name: "first", namespace: "default" },
      status: { phase: "Succeeded", exitCode: 0, output: "ran: hi", resolvedImageDigest: DIGEST },
    });
    expect(runner.commandsOf("run_once")[0]).toMatchObject({
      run_id: "first",
      command: ["/bin/node", "/app/x.ts"],
      credentials: { MODEL_API_KEY: "sk-x" },
    });
    const refused = await call("POST", "/v1/namespaces/default/agentruns", {
      apiVersion: API,
      kind: "AgentRun",
      spec: { agentRef: "alice", input: "hi" },
    });
    expect(refused.status).toBe(412);
    expect(refused.body.message).toMatch(/HarnessSession/);
  });
});
