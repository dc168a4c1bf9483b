import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { RUNNER_PROTOCOL_VERSION, type RunnerCommand } from "../../contracts/runner-protocol.ts";
import { until } from "../../test/support/until.ts";
import type { Logger } from "../observability/log.ts";
import { defaultHandler, type FakeRunner, provisioned } from "../testing/fake-runner.ts";
import type { SseClient } from "../testing/sse-client.ts";
import { ADMIN_TOKEN, startTestServer, TEST_IMAGE, type TestServer } from "../testing/test-server.ts";

/**
 * An Agent's literal credential goes to the runner that provisions its workload and nowhere
 * else: not in any answer of the API (GETs, lists, errors, status, metrics), not on the event
 * stream, not in any log line (the access log, the audit of proxied requests, errors logged).
 * A planted value is searched for everywhere the server speaks; the provision command carrying it
 * shows the search looks where the value is.
 */
const PLANTED = "sk-planted-0123456789-abcdefghij";
const DIGEST = TEST_IMAGE.split("@")[1] ?? "";
const NS = "/v1/namespaces/default";

let t: TestServer;
let runner: FakeRunner;
let events: SseClient;
const logLines: string[] = [];
const answers: string[] = [];
let failProvision = false;

const log: Logger = (level, msg, fields) => {
  logLines.push(JSON.stringify({ level, msg, ...fields }));
};

function relayAnswer(command: Extract<RunnerCommand, { kind: "relay" }>): void {
  const result = {
    id: command.request.id,
    outcome: "succeeded",
    output: "ok",
    usage: { input_tokens: 1, output_tokens: 1 },
    started_at: new Date().toISOString(),
    finished_at: new Date().toISOString(),
  };
  for (const [data, done, status] of [
    [JSON.stringify(result), false, 200],
    ["", true, undefined],
  ] as const)
    runner.send({
      version: RUNNER_PROTOCOL_VERSION,
      type: "relay_chunk",
      payload: { relay_id: command.relay_id, data, done, ...(status !== undefined ? { status } : {}) },
    });
}

async function call(method: string, path: string, body?: unknown): Promise<{ status: number; text: string }> {
  const response = await fetch(`${t.server.url}${path}`, {
    method,
    headers: { authorization: `Bearer ${ADMIN_TOKEN}`, "content-type": "application/json" },
    ...(body !== undefined ? { body: typeof body === "string" ? body : JSON.stringify(body) } : {}),
  });
  const text = await response.text();
  answers.push(`${method} ${path} ${response.status} ${text}`);
  return { status: response.status, text };
}

const agent = (credentials: unknown[]) => ({
  apiVersion: "agent-sessions.dev/v1alpha1",
  kind: "Agent",
  metadata: { name: "carol" },
  spec: { runtimeRef: "reference", credentials },
});

beforeEach(async () => {
  logLines.length = 0;
  answers.length = 0;
  failProvision = false;
  t = await startTestServer({}, { log });
  runner = await t.runner({
    handler: (command) => {
      if (command.kind === "provision")
        return failProvision
          ? { ok: false, error: { code: "INTERNAL", message: "pulumi up failed: the container exited" } }
          : provisioned(command, DIGEST);
      if (command.kind === "relay") {
        setImmediate(() => relayAnswer(command));
        return "no-reply";
      }
      return defaultHandler(command);
    },
  });
  events = await t.events();
});
afterEach(async () => {
  await t.close();
});

describe("a planted Agent credential", () => {
  it("reaches the provisioning runner and appears in no answer, event or log line", async () => {
    expect(
      (await call("PUT", `${NS}/agents/carol`, agent([{ name: "OPENAI_API_KEY", value: PLANTED }]))).status,
    ).toBe(201);
    await call("GET", `${NS}/agents/carol`);
    await call("GET", `${NS}/agents`);
    // Bad input that carries the value: refused without echoing it.
    const badName = await call("PUT", `${NS}/agents/carol`, agent([{ name: "not a name", value: PLANTED }]));
    expect(badName.status).toBe(400);
    const both = await call(
      "PUT",
      `${NS}/agents/carol`,
      agent([{ name: "K", value: PLANTED, secretRef: { env: "K" } }]),
    );
    expect(both.status).toBe(400);
    expect(
      (await call("PUT", `${NS}/agents/carol`, `{"spec":{"credentials":[{"value":"${PLANTED}"`)).status,
    ).toBe(400);

    // The seed-004 path: provision, start, status, message, a provision the runner fails.
    const provisionedWs = await call("POST", "/v1/rpc/ProvisionAgentWorkspace", { agent_ref: "carol" });
    expect(provisionedWs.status).toBe(200);
    const container = JSON.parse(provisionedWs.text).container_name as string;
    const started = await call("POST", "/v1/rpc/StartAgentSession", { container_name: container });
    expect(started.status).toBe(200);
    const sessionId = JSON.parse(started.text).session_id as string;
    await call("POST", "/v1/rpc/GetAgentStatus", {});
    await call("POST", "/v1/rpc/SendAgentMessage", {
      session_id: sessionId,
      message: { type: "message", text: "hi" },
    });
    await call("POST", "/v1/rpc/RemoveAgentWorkspace", { container_name: container });
    failProvision = true;
    const failed = await call("POST", "/v1/rpc/ProvisionAgentWorkspace", {
      agent_ref: "carol",
      client_request_id: "again",
    });
    expect(failed.status).toBeGreaterThanOrEqual(500);
    failProvision = false;

    // A HarnessSession of the Agent, Ready, and one proxied request (its audit line).
    const manifest = {
      apiVersion: "agent-sessions.dev/v1alpha1",
      kind: "HarnessSession",
      metadata: { name: "chat" },
      spec: { agentRef: "carol", runtimeRef: "reference" },
    };
    expect((await call("PUT", `${NS}/harnesssessions/chat`, manifest)).status).toBe(201);
    await until("chat Ready", async () => {
      const { text } = await call("GET", `${NS}/harnesssessions/chat`);
      return JSON.parse(text).status?.phase === "Ready" ? true : undefined;
    });
    expect((await call("POST", `${NS}/harnesssessions/chat/requests`, { input: "hello" })).status).toBe(200);
    await until("the audit line", () =>
      logLines.some((l) => l.includes('"msg":"audit"')) ? true : undefined,
    );
    for (const path of [
      "/v1/runners",
      "/metrics",
      `${NS}/harnesssessions`,
      `${NS}/harnesssessions/chat`,
      "/v1/whoami",
    ])
      await call("GET", path);

    // The value did travel, to the runner only.
    const provisions = runner.commands.filter((c) => c.kind === "provision");
    expect(provisions.length).toBeGreaterThanOrEqual(3);
    for (const p of provisions) expect(JSON.stringify(p)).toContain(PLANTED);
    // And nowhere else the server speaks.
    expect(answers.length).toBeGreaterThan(15);
    for (const a of answers) expect(a).not.toContain(PLANTED);
    expect(logLines.length).toBeGreaterThan(10);
    for (const line of logLines) expect(line).not.toContain(PLANTED);
    expect(events.events.length).toBeGreaterThan(3);
    for (const e of events.events) expect(e.data).not.toContain(PLANTED);
  });
});
