/**
 * The runner's model gateway, counted by the server (issue 35), against a real server with fake
 * runners over the real WebSocket: a HarnessSession's `status.usage` is what the gateway
 * reported, whatever the adapter claims (that is `status.claimedUsage`); a request's result
 * carries the gateway's usage of its model calls; a refusal is an event of the session; the
 * Prometheus counters move; and a runner that does not own the workspace changes nothing.
 */
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { readSse } from "../../client/sse.ts";
import type { ResultRecord, Usage } from "../../contracts/adapter.ts";
import { RUNNER_PROTOCOL_VERSION, type RunnerCommand } from "../../contracts/runner-protocol.ts";
import { defaultHandler, type FakeRunner, provisioned, type Reply } from "../testing/fake-runner.ts";
import { ADMIN_TOKEN, startTestServer, TEST_IMAGE, type TestServer } from "../testing/test-server.ts";
import { until } from "../../test/support/until.ts";

// biome-ignore lint/suspicious/noExplicitAny: JSON bodies of many shapes, read by assertions
type Json = any;

const DIGEST = TEST_IMAGE.split("@")[1] ?? "";
const BASE = "/v1/namespaces/default/harnesssessions";
const ZERO = { inputTokens: 0, outputTokens: 0, reportedRequests: 0, unavailableRequests: 0 };

type RelayCommand = Extract<RunnerCommand, { kind: "relay" }>;
let onRelay: (command: RelayCommand, runner: FakeRunner) => Reply | Promise<Reply>;
let t: TestServer;
let runner: FakeRunner;

/** What the adapter answers: it claims 3 in, 2 out (and whatever `over` adds). */
function result(id: string, over: Record<string, unknown> = {}): ResultRecord {
  return {
    id,
    outcome: "succeeded",
    output: `echo ${id}`,
    usage: { input_tokens: 3, output_tokens: 2 },
    started_at: new Date().toISOString(),
    finished_at: new Date().toISOString(),
    ...over,
  } as ResultRecord;
}

function chunk(r: FakeRunner, relayId: string, data: string, done: boolean, status?: number): void {
  r.send({
    version: RUNNER_PROTOCOL_VERSION,
    type: "relay_chunk",
    payload: { relay_id: relayId, data, done, ...(status !== undefined ? { status } : {}) },
  });
}

function gatewayUsage(
  r: FakeRunner,
  containerName: string,
  usage: Usage,
  extra: { relay_id?: string; model?: string } = {},
): void {
  r.send({
    version: RUNNER_PROTOCOL_VERSION,
    type: "gateway_usage",
    payload: { container_name: containerName, agent: "default/alice", model: "gpt-test", usage, ...extra },
  });
}

function gatewayRefused(r: FakeRunner, containerName: string, message: string): void {
  r.send({
    version: RUNNER_PROTOCOL_VERSION,
    type: "gateway_refused",
    payload: {
      container_name: containerName,
      agent: "default/alice",
      reason: "TokenBudgetExceeded",
      message,
    },
  });
}

/** Two model calls with usage and one without, then the adapter's reply (as the runner orders them). */
const answerAfterThreeCalls =
  (adapterSays: Record<string, unknown> = {}) =>
  (command: RelayCommand, r: FakeRunner): Reply => {
    const relay = { relay_id: command.relay_id };
    gatewayUsage(
      r,
      command.container_name,
      { input_tokens: 100, output_tokens: 20 },
      { ...relay, model: "m1" },
    );
    gatewayUsage(
      r,
      command.container_name,
      { input_tokens: 50, output_tokens: 5 },
      { ...relay, model: "m2" },
    );
    gatewayUsage(r, command.container_name, "unavailable", relay);
    chunk(r, command.relay_id, JSON.stringify(result(command.request.id, adapterSays)), false, 200);
    chunk(r, command.relay_id, "", true);
    return { ok: true, result: { status: 200 } };
  };

async function call(method: string, path: string, body?: unknown): Promise<{ status: number; body: Json }> {
  const response = await fetch(`${t.server.url}${path}`, {
    method,
    headers: { authorization: `Bearer ${ADMIN_TOKEN}`, "content-type": "application/json" },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });
  const text = await response.text();
  try {
    return { status: response.status, body: JSON.parse(text) };
  } catch {
    return { status: response.status, body: text };
  }
}

const chat = async (): Promise<Json> => (await call("GET", `${BASE}/chat`)).body;

async function readyChat(): Promise<Json> {
  const created = await call("PUT", `${BASE}/chat`, {
    apiVersion: "agent-sessions.dev/v1alpha1",
    kind: "HarnessSession",
    metadata: { name: "chat" },
    spec: { agentRef: "alice", runtimeRef: "reference" },
  });
  expect(created.status).toBe(201);
  return until("Ready", async () => {
    const s = await chat();
    return s.status.phase === "Ready" ? s : undefined;
  });
}

/** The `agent_sessions_gateway_*` lines of `GET /metrics`. */
async function gatewayMetrics(): Promise<string[]> {
  const { body } = await call("GET", "/metrics");
  return String(body)
    .split("\n")
    .filter((line) => line.startsWith("agent_sessions_gateway_"));
}

const handler = (command: RunnerCommand): Reply | Promise<Reply> => {
  switch (command.kind) {
    case "provision":
      return provisioned(command, DIGEST);
    case "relay":
      return onRelay(command, runner);
    default:
      return defaultHandler(command);
  }
};

beforeEach(async () => {
  t = await startTestServer();
  onRelay = answerAfterThreeCalls();
  runner = await t.runner({ handler });
});
afterEach(async () => {
  await t.close();
});

describe("usage the runner's model gateway reported", () => {
  it("is the session's status.usage, whatever the adapter claims (that is status.claimedUsage)", async () => {
    await readyChat();
    const reply = await call("POST", `${BASE}/chat/requests`, { input: "hello", id: "r-1" });
    expect(reply.status).toBe(200);
    const s = await until("the gateway's calls counted", async () => {
      const c = await chat();
      return c.status.usage.reportedRequests === 2 ? c : undefined;
    });
    expect(s.status.usage).toEqual({
      inputTokens: 150,
      outputTokens: 25,
      reportedRequests: 2,
      unavailableRequests: 1,
      source: "gateway",
    });
    expect(s.status.claimedUsage).toEqual({
      inputTokens: 3,
      outputTokens: 2,
      reportedRequests: 1,
      unavailableRequests: 0,
    });
  });

  it("is a request's result usage (summed over its model calls), with the adapter's claim as claimed_usage", async () => {
    await readyChat();
    const reply = await call("POST", `${BASE}/chat/requests`, { input: "hello", id: "r-1" });
    expect(reply.status).toBe(200);
    expect(reply.body.usage).toEqual({
      input_tokens: 150,
      output_tokens: 25,
      source: "gateway",
      model_calls: 2,
      model: "m2",
    });
    expect(reply.body.claimed_usage).toEqual({ input_tokens: 3, output_tokens: 2 });
  });

  it("is in the final result event of a streamed reply", async () => {
    await readyChat();
    onRelay = (command, r) => {
      const id = command.relay_id;
      chunk(r, id, 'data: {"type":"delta","text":"one"}\n\n', false, 200);
      const done = { type: "result", result: result(command.request.id) };
      chunk(r, id, `data: ${JSON.stringify(done)}\n\n`, false);
      // The gateway's report of the call comes after the adapter's result event, before the end.
      gatewayUsage(r, command.container_name, { input_tokens: 40, output_tokens: 4 }, { relay_id: id });
      chunk(r, id, "", true);
      return { ok: true, result: { status: 200 } };
    };
    const response = await fetch(`${t.server.url}${BASE}/chat/requests`, {
      method: "POST",
      headers: { authorization: `Bearer ${ADMIN_TOKEN}`, "content-type": "application/json" },
      body: JSON.stringify({ input: "count", stream: true }),
    });
    if (!response.body) throw new Error("no body");
    const events: { event: string; data: Json }[] = [];
    for await (const { event, data } of readSse(response.body))
      events.push({ event, data: JSON.parse(data) });
    expect(events.map((e) => e.event)).toEqual(["delta", "result"]);
    expect(events[1]?.data.result).toMatchObject({
      usage: { input_tokens: 40, output_tokens: 4, source: "gateway", model_calls: 1, model: "gpt-test" },
      claimed_usage: { input_tokens: 3, output_tokens: 2 },
    });
  });

  it("is never claimed by an adapter: its source and claimed_usage are the server's to write", async () => {
    await readyChat();
    onRelay = (command, r) => {
      const forged = result(command.request.id, {
        usage: { input_tokens: 3, output_tokens: 2, source: "gateway", model_calls: 9 },
        claimed_usage: { input_tokens: 1, output_tokens: 1 },
      });
      chunk(r, command.relay_id, JSON.stringify(forged), false, 200);
      chunk(r, command.relay_id, "", true);
      return { ok: true, result: { status: 200 } };
    };
    const reply = await call("POST", `${BASE}/chat/requests`, { input: "hello", id: "forged" });
    expect(reply.status).toBe(200);
    // No gateway report of the request: the adapter's numbers, as its claim and nothing more.
    expect(reply.body.usage).toEqual({ input_tokens: 3, output_tokens: 2 });
    expect(reply.body).not.toHaveProperty("claimed_usage");
    const s = await chat();
    expect(s.status.usage).toEqual(ZERO);
    expect(s.status.lastRequestUsage).toEqual({ input_tokens: 3, output_tokens: 2 });
  });

  it("counts into the Prometheus counters by namespace and Agent", async () => {
    await readyChat();
    await call("POST", `${BASE}/chat/requests`, { input: "hello", id: "r-1" });
    const lines = await until("counted", async () => {
      const l = await gatewayMetrics();
      return l.some((line) => line.startsWith("agent_sessions_gateway_model_calls_total")) ? l : undefined;
    });
    expect(lines).toEqual(
      expect.arrayContaining([
        'agent_sessions_gateway_tokens_total{namespace="default",agent="alice",direction="input"} 150',
        'agent_sessions_gateway_tokens_total{namespace="default",agent="alice",direction="output"} 25',
        'agent_sessions_gateway_model_calls_total{namespace="default",agent="alice"} 3',
      ]),
    );
  });
});

describe("a refusal of the runner's model gateway", () => {
  it("is an error event of the session with its reason and message (never a gateway token), and counted", async () => {
    const s = await readyChat();
    const events = await t.events(`?session_id=${s.status.sessionId}`);
    gatewayRefused(
      runner,
      s.status.containerName,
      "tokens per day exceeded (100000) for asgw_abc123DEF; try again tomorrow",
    );
    await events.until((e) => e.some((x) => x.data.includes("TokenBudgetExceeded")));
    const refusal = events.frames<Json>().find((f) => f.payload?.reason === "TokenBudgetExceeded");
    expect(refusal).toMatchObject({
      type: "error",
      session_id: s.status.sessionId,
      payload: { source: "gateway", reason: "TokenBudgetExceeded" },
    });
    expect(refusal.payload.message).toMatch(/^tokens per day exceeded \(100000\)/);
    expect(JSON.stringify(events.events)).not.toContain("asgw_abc123DEF");
    expect(await gatewayMetrics()).toContain(
      'agent_sessions_gateway_refusals_total{namespace="default",agent="alice",reason="TokenBudgetExceeded"} 1',
    );
  });
});

describe("a gateway report from a runner that does not own the workspace", () => {
  it("changes nothing: no usage, no result usage, no event, no metric", async () => {
    const s = await readyChat();
    const other = await t.runner({ name: "other-runner", handler: defaultHandler });
    const events = await t.events(`?session_id=${s.status.sessionId}`);
    onRelay = async (command, r) => {
      // The other runner claims a call of this very request, then the owner answers.
      gatewayUsage(
        other,
        command.container_name,
        { input_tokens: 999, output_tokens: 999 },
        {
          relay_id: command.relay_id,
        },
      );
      await new Promise((resolve) => setTimeout(resolve, 100));
      chunk(r, command.relay_id, JSON.stringify(result(command.request.id)), false, 200);
      chunk(r, command.relay_id, "", true);
      return { ok: true, result: { status: 200 } };
    };
    const reply = await call("POST", `${BASE}/chat/requests`, { input: "hello", id: "r-1" });
    expect(reply.body.usage).toEqual({ input_tokens: 3, output_tokens: 2 });
    expect(reply.body).not.toHaveProperty("claimed_usage");
    gatewayUsage(other, s.status.containerName, { input_tokens: 999, output_tokens: 999 });
    gatewayRefused(other, s.status.containerName, "not yours");
    // Given time to be handled (and dropped), then the owner's report, which counts.
    await new Promise((resolve) => setTimeout(resolve, 300));
    gatewayUsage(runner, s.status.containerName, { input_tokens: 1, output_tokens: 1 });
    const after = await until("the owner's call counted", async () => {
      const c = await chat();
      return c.status.usage.reportedRequests > 0 ? c : undefined;
    });
    expect(after.status.usage).toEqual({
      inputTokens: 1,
      outputTokens: 1,
      reportedRequests: 1,
      unavailableRequests: 0,
      source: "gateway",
    });
    expect(events.frames<Json>().filter((f) => f.type === "error")).toEqual([]);
    const lines = await gatewayMetrics();
    expect(lines).toContain('agent_sessions_gateway_model_calls_total{namespace="default",agent="alice"} 1');
    expect(lines.filter((line) => line.includes("refusals_total{"))).toEqual([]);
  });
});
