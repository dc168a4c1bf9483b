import OpenAI from "openai";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { AgentSessionsClient } from "../../client/client.ts";
import type { ResultRecord } from "../../contracts/adapter.ts";
import { ChatCompletion, ChatCompletionChunk, OpenAIErrorBody } from "../../contracts/openai-chat.ts";
import { RUNNER_PROTOCOL_VERSION, type RunnerCommand } from "../../contracts/runner-protocol.ts";
import { until } from "../../test/support/until.ts";
import type { FakeRunner, Reply } from "../testing/fake-runner.ts";
import { defaultHandler, provisioned } from "../testing/fake-runner.ts";
import { ADMIN_TOKEN, startTestServer, TEST_IMAGE, type TestServer } from "../testing/test-server.ts";

// biome-ignore lint/suspicious/noExplicitAny: JSON bodies of many shapes, read by assertions
type Json = any;

const DIGEST = TEST_IMAGE.split("@")[1] ?? "";
const BASE = "/v1/namespaces/default/harnesssessions";
const OPENAI = `${BASE}/chat/openai/v1`;

type RelayCommand = Extract<RunnerCommand, { kind: "relay" }>;
let onRelay: (command: RelayCommand, runner: FakeRunner) => Reply | Promise<Reply>;
let t: TestServer;
let runner: FakeRunner;
let logs: { message: string; fields: Json }[];
let chatToken: string;

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

function chunk(r: FakeRunner, relayId: string, data: string, done: boolean, status?: number): void {
  r.send({
    version: RUNNER_PROTOCOL_VERSION,
    type: "relay_chunk",
    payload: { relay_id: relayId, data, done, ...(status !== undefined ? { status } : {}) },
  });
}

/** The adapter's answer: the result record, or its stream of deltas then the result. */
const answer = (command: RelayCommand, r: FakeRunner): Reply => {
  const record = result(command.request.id, { output: "Hello there" });
  if (command.request.stream) {
    chunk(r, command.relay_id, 'data: {"type":"delta","text":"Hello"}\n\n', false, 200);
    chunk(r, command.relay_id, 'data: {"type":"tool","phase":"start","call_id":"c1","name":"ls"}\n\n', false);
    chunk(r, command.relay_id, 'data: {"type":"delta","text":" there"}\n\n', false);
    chunk(r, command.relay_id, `data: ${JSON.stringify({ type: "result", result: record })}\n\n`, false);
  } else chunk(r, command.relay_id, JSON.stringify(record), false, 200);
  chunk(r, command.relay_id, "", true);
  return { ok: true, result: { status: 200 } };
};

async function call(method: string, path: string, body?: unknown, token = ADMIN_TOKEN) {
  const response = await fetch(`${t.server.url}${path}`, {
    method,
    headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
    ...(body !== undefined ? { body: typeof body === "string" ? body : JSON.stringify(body) } : {}),
  });
  const text = await response.text();
  let json: Json;
  try {
    json = JSON.parse(text);
  } catch {
    json = text;
  }
  return { status: response.status, body: json, text, headers: response.headers };
}

/** The official client, its base URL from the typed client (client/client.ts). */
const client = (token = chatToken, session = "chat") =>
  new OpenAI({
    baseURL: new AgentSessionsClient({ baseUrl: t.server.url }).openAIBaseUrl("default", session),
    apiKey: token,
    maxRetries: 0,
  });

const status = async () => (await call("GET", `${BASE}/chat`)).body.status;
const audits = () => logs.filter((l) => l.message === "audit").map((l) => l.fields);

beforeEach(async () => {
  logs = [];
  t = await startTestServer(
    { requestTimeoutMs: 2_000, requestBodyMaxBytes: 2_048, replyMaxBytes: 4_096, idleCheckMs: 100 },
    { log: (_level, message, fields) => logs.push({ message, fields }) },
  );
  onRelay = answer;
  runner = await t.runner({
    handler: (command) => {
      switch (command.kind) {
        case "provision":
          return provisioned(command, DIGEST);
        case "relay":
          return onRelay(command, runner);
        default:
          return defaultHandler(command);
      }
    },
  });
  const created = await call("PUT", `${BASE}/chat`, {
    apiVersion: "agent-sessions.dev/v1alpha1",
    kind: "HarnessSession",
    metadata: { name: "chat" },
    spec: { agentRef: "alice", runtimeRef: "reference" },
  });
  expect(created.status).toBe(201);
  await until("Ready", async () => ((await status()).phase === "Ready" ? true : undefined));
  const token = await call("POST", "/v1/tokens", { name: "chatter", scopes: ["session:default/chat:chat"] });
  chatToken = token.body.token;
});
afterEach(async () => {
  await t.close();
});

describe("the OpenAI-compatible endpoint of a session (official openai client)", () => {
  it("answers a chat completion with the agent's text and usage; the last user message is the turn", async () => {
    const completion = await client().chat.completions.create({
      model: "whatever",
      messages: [
        { role: "system", content: "be brief" },
        { role: "user", content: "an earlier turn" },
        { role: "assistant", content: "an earlier answer" },
        {
          role: "user",
          content: [
            { type: "text", text: "first part" },
            { type: "text", text: "second part" },
          ],
        },
      ],
    });
    expect(ChatCompletion.parse(completion)).toMatchObject({
      object: "chat.completion",
      model: "whatever",
      choices: [{ index: 0, message: { role: "assistant", content: "Hello there" }, finish_reason: "stop" }],
      usage: { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 },
    });
    // The session keeps its conversation: only the last user message went to the agent.
    const [relay] = runner.commandsOf("relay");
    expect(relay?.request).toMatchObject({ input: "first part\nsecond part", stream: false });
    // The completion's id is the request's: `…/requests/{id}/cancel` names it.
    expect(completion.id).toBe(relay?.request.id);
    expect(completion.id).toMatch(/^chatcmpl-/);
    expect(await status()).toMatchObject({
      requestCount: 1,
      lastRequestOutcome: "succeeded",
      activeRequests: 0,
    });
    expect(audits()).toEqual([
      expect.objectContaining({
        request_id: completion.id,
        outcome: "succeeded",
        stream: false,
        input_tokens: 3,
      }),
    ]);
  });

  it("streams chat.completion.chunk events, then the usage chunk (include_usage), then [DONE]", async () => {
    const stream = await client().chat.completions.create({
      model: "tiny",
      messages: [{ role: "user", content: "count" }],
      stream: true,
      stream_options: { include_usage: true },
    });
    const chunks = [];
    for await (const c of stream) chunks.push(ChatCompletionChunk.parse(c));
    expect(chunks.map((c) => c.choices[0]?.delta.content ?? "").join("")).toBe("Hello there");
    expect(chunks[0]?.choices[0]?.delta.role).toBe("assistant");
    expect(chunks.at(-2)?.choices[0]?.finish_reason).toBe("stop");
    expect(chunks.at(-1)).toMatchObject({ choices: [], usage: { prompt_tokens: 3, completion_tokens: 2 } });
    expect(new Set(chunks.map((c) => c.id)).size).toBe(1);
    expect(runner.commandsOf("relay")[0]?.request).toMatchObject({ input: "count", stream: true });
    expect(await status()).toMatchObject({ requestCount: 1, lastRequestOutcome: "succeeded" });
    await until("audited", async () => (audits().length === 1 ? true : undefined));
    expect(audits()[0]).toMatchObject({ outcome: "succeeded", stream: true, input_tokens: 3 });
  });

  it("ends the raw stream with data: [DONE], no usage chunk unless asked", async () => {
    const reply = await call("POST", `${OPENAI}/chat/completions`, {
      messages: [{ role: "user", content: "x" }],
      stream: true,
    });
    expect(reply.headers.get("content-type")).toMatch(/^text\/event-stream/);
    const events = reply.text.split("\n\n").filter((e) => e !== "");
    expect(events.at(-1)).toBe("data: [DONE]");
    expect(events.every((e) => e.startsWith("data: "))).toBe(true);
    const json = events.slice(0, -1).map((e) => JSON.parse(e.slice("data: ".length)));
    expect(json.every((c) => c.usage === undefined && c.choices.length === 1)).toBe(true);
  });

  it("a failure after the first byte is an error event the client raises, without [DONE]", async () => {
    onRelay = (command, r) => {
      chunk(r, command.relay_id, 'data: {"type":"delta","text":"half"}\n\n', false, 200);
      return { ok: false, error: { code: "UNAVAILABLE", message: "the adapter went away" } };
    };
    const stream = await client().chat.completions.create({
      model: "tiny",
      messages: [{ role: "user", content: "x" }],
      stream: true,
    });
    const seen: string[] = [];
    await expect(
      (async () => {
        for await (const c of stream) seen.push(c.choices[0]?.delta.content ?? "");
      })(),
    ).rejects.toThrow(/the adapter went away/);
    expect(seen).toEqual(["half"]);
    expect(await status()).toMatchObject({ lastRequestOutcome: "failed", activeRequests: 0 });
  });

  it("resumes a session stopped for IdleTimeout (spec.autoResume) and answers, like …/requests", async () => {
    expect(
      (await call("PATCH", `${BASE}/chat`, { spec: { idleTimeout: "1s", autoResume: true } })).status,
    ).toBe(200);
    await until("Stopped", async () => ((await status()).phase === "Stopped" ? true : undefined));
    const completion = await client().chat.completions.create({
      model: "tiny",
      messages: [{ role: "user", content: "wake up" }],
    });
    expect(completion.choices[0]?.message.content).toBe("Hello there");
    expect(await status()).toMatchObject({ phase: "Ready", requestCount: 1, lastRequestId: completion.id });
    expect(runner.commandsOf("start").map((c) => c.resume)).toEqual([false, true]);
  });

  it("lists the session as its one model", async () => {
    const models = await client().models.list();
    expect(models.data.map((m) => m.id)).toEqual(["chat"]);
    expect(models.data[0]).toMatchObject({ object: "model", owned_by: "agent-sessions" });
  });

  it("a client that goes away cancels the request upstream; the outcome is cancelled", async () => {
    onRelay = (command, r) => {
      chunk(r, command.relay_id, 'data: {"type":"delta","text":"a"}\n\n', false, 200);
      return "no-reply";
    };
    const controller = new AbortController();
    const stream = await client().chat.completions.create(
      { model: "tiny", messages: [{ role: "user", content: "long" }], stream: true },
      { signal: controller.signal },
    );
    for await (const _ of stream) {
      controller.abort();
      break;
    }
    await runner.until(() => runner.commandsOf("cancel_relay").length === 1);
    const settled = await until("settled", async () => {
      const s = await status();
      return s.activeRequests === 0 ? s : undefined;
    });
    expect(settled).toMatchObject({ lastRequestOutcome: "cancelled", errorCount: 0 });
  });
});

describe("errors of the OpenAI-compatible endpoint, in OpenAI's shape", () => {
  const post = (body: unknown, token = chatToken, path = `${OPENAI}/chat/completions`) =>
    call("POST", path, body, token);
  const refused = (reply: { status: number; body: Json }, status: number, param: string | null) => {
    expect(reply.status, JSON.stringify(reply.body)).toBe(status);
    const body = OpenAIErrorBody.parse(reply.body);
    expect(body.error.param).toBe(param);
    expect(Object.keys(reply.body)).toEqual(["error"]);
    return body.error;
  };

  it("refuses bad input with 400 invalid_request_error naming the field, and relays nothing", async () => {
    expect(refused(await post({ model: "m" }), 400, "messages").message).toMatch(/messages/);
    expect(refused(await post({ messages: [] }), 400, "messages").message).toMatch(/at least one message/);
    const noContent = refused(await post({ messages: [{ role: "user" }] }), 400, "messages.0.content");
    expect(noContent).toMatchObject({ type: "invalid_request_error", code: "INVALID_ARGUMENT" });
    expect(noContent.message).toMatch(/messages\.0\.content: is required/);
    expect(
      refused(await post({ messages: [{ role: "wizard", content: "hi" }] }), 400, "messages.0.role").message,
    ).toMatch(/user/);
    expect(
      refused(await post({ messages: [{ role: "user", content: "hi" }], n: 2 }), 400, "n").message,
    ).toMatch(/n must be 1/);
    const image = refused(
      await post({
        messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: "https://x/y.png" } }] }],
      }),
      400,
      "messages.0.content.0.type",
    );
    expect(image.message).toMatch(/"image_url" are not accepted; a session takes text parts only/);
    expect(
      refused(
        await post({ messages: [{ role: "system", content: "only a system prompt" }] }),
        400,
        "messages",
      ).message,
    ).toMatch(/no user message/);
    expect(refused(await post("{not json"), 400, null).message).toMatch(/not valid JSON/);
    const big = refused(await post({ messages: [{ role: "user", content: "x".repeat(4_000) }] }), 413, null);
    expect(big).toMatchObject({ type: "invalid_request_error", code: "RESOURCE_EXHAUSTED" });
    expect(big.message).toMatch(/2048 bytes/);
    expect(runner.commandsOf("relay")).toEqual([]);
    expect((await status()).requestCount).toBe(0);
  });

  it("the official client raises its typed errors: 404 unknown session, 401 bad token, 403 wrong scope", async () => {
    const messages = [{ role: "user" as const, content: "hi" }];
    await expect(
      client(ADMIN_TOKEN, "nope").chat.completions.create({ model: "m", messages }),
    ).rejects.toThrow(OpenAI.NotFoundError);
    const unknown = await post({ messages }, ADMIN_TOKEN, `${BASE}/nope/openai/v1/chat/completions`);
    expect(refused(unknown, 404, null)).toMatchObject({ type: "not_found_error", code: "NOT_FOUND" });
    await expect(client("ast_not-a-token").chat.completions.create({ model: "m", messages })).rejects.toThrow(
      OpenAI.AuthenticationError,
    );
    expect(refused(await post({ messages }, "ast_not-a-token"), 401, null)).toMatchObject({
      type: "authentication_error",
      code: "UNAUTHENTICATED",
    });
    // A token that reads the namespace but may not chat.
    const other = await call("POST", "/v1/tokens", { name: "reader", scopes: ["namespace:default:view"] });
    expect(other.status).toBe(201);
    await expect(client(other.body.token).models.list()).rejects.toThrow(OpenAI.PermissionDeniedError);
    const denied = refused(await post({ messages }, other.body.token), 403, null);
    expect(denied).toMatchObject({ type: "permission_error", code: "PERMISSION_DENIED" });
    expect(denied.message).toContain("session:default/chat:chat");
    expect(refused(await call("GET", `${BASE}/nope/openai/v1/models`), 404, null).code).toBe("NOT_FOUND");
    expect((await status()).requestCount).toBe(0);
  });

  it("a failed turn is a 503 server_error carrying the agent's reason", async () => {
    onRelay = (command, r) => {
      chunk(
        r,
        command.relay_id,
        JSON.stringify(result(command.request.id, { outcome: "failed", error: "model down" })),
        false,
        200,
      );
      chunk(r, command.relay_id, "", true);
      return { ok: true, result: { status: 200 } };
    };
    const reply = await post({ messages: [{ role: "user", content: "hi" }] });
    expect(reply.status).toBe(503);
    expect(OpenAIErrorBody.parse(reply.body).error).toMatchObject({
      type: "server_error",
      code: "UNAVAILABLE",
    });
    expect(reply.body.error.message).toMatch(/model down/);
  });
});
