/**
 * A runtime that speaks only the `openai-chat` session contract (issue 41), run as a session end
 * to end, the engine a parameter: `serve --no-runner`, a `runner` process, real Pulumi stacks,
 * the fixture harness's image (test/support/openai-chat-image.ts: test/fixtures/openai-chat-harness.ts
 * as the entrypoint, nothing of our adapter) declared as an AgentRuntime with
 * `session: {protocol: "openai-chat", port}`, and the loopback model server, which answers from
 * the whole conversation a harness sends it. Created, asked, streamed, asked through the official
 * `openai` client on the session's OpenAI endpoint, stopped and resumed with the conversation
 * kept (on the session's volume), reached again after a runner restart, paused and woken (Docker:
 * the paused tier), deleted. Bad `session` declarations are refused.
 */
import { randomBytes } from "node:crypto";
import OpenAI from "openai";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { API_VERSION } from "../../contracts/resources.ts";
import type { ModelServer } from "../fixtures/model-server.ts";
import { OPENAI_CHAT_FIXTURE_PORT, openAIChatFixtureImage } from "../support/openai-chat-image.ts";
import type { Engine } from "../support/engine-probes.ts";
import { type Json, System, startSessionModelServer, until, writeLogTails } from "../support/system.ts";
import { sseEvents } from "../support/sse.ts";

export type OpenAIChatRuntimeScenarioOptions = {
  engine: Engine;
  /** How long provisioning to Ready may take, in seconds. @default 240 */
  readySeconds?: number;
};

const NS = "/v1/namespaces/default";
const SESSIONS = `${NS}/harnesssessions`;

export function openAIChatRuntimeScenarios(options: OpenAIChatRuntimeScenarioOptions): void {
  const READY_MS = (options.readySeconds ?? 240) * 1000;
  const suffix = randomBytes(2).toString("hex");
  const RUNTIME = `openai-chat-${suffix}`;
  const NAME = `oc${suffix}`;
  const TOKEN = `tok-${randomBytes(3).toString("hex")}`;
  let system: System;
  let model: ModelServer;
  let image: string;

  const session = async (): Promise<Json> => (await system.call("GET", `${SESSIONS}/${NAME}`)).body;
  async function phase(want: string): Promise<Json> {
    return until(
      `${NAME} ${want}`,
      async () => {
        const s = await session();
        if (s.status?.phase === "Failed") throw new Error(`${NAME} failed: ${JSON.stringify(s.status)}`);
        return s.status?.phase === want ? s : undefined;
      },
      READY_MS,
    );
  }
  const ask = (input: string) => system.call("POST", `${SESSIONS}/${NAME}/requests`, { input });
  const runtimeWith = (session: unknown) => ({
    apiVersion: API_VERSION,
    kind: "AgentRuntime",
    metadata: { name: RUNTIME },
    spec: { image, contract: "v1alpha2", capabilities: ["streaming"], approved: true, session },
  });

  beforeAll(async () => {
    image = openAIChatFixtureImage();
    model = await startSessionModelServer(options.engine);
    process.env.E2E_MODEL_KEY = `sk-${randomBytes(8).toString("hex")}`;
    system = new System();
    await system.startServer();
    await system.startRunner(["--engine", options.engine]);
  }, 180_000);

  afterEach((context) => {
    if (context.task.result?.state === "fail") writeLogTails(system);
  });

  afterAll(async () => {
    await system?.call("DELETE", `${SESSIONS}/${NAME}`).catch(() => undefined);
    await system?.stop();
    await model?.close();
  });

  describe(`an openai-chat runtime as a session (real engine: ${options.engine})`, () => {
    it("a session declaration other than openai-chat on a port it can listen on is refused, nothing stored", async () => {
      for (const [bad, field] of [
        [{ protocol: "sympozium", port: OPENAI_CHAT_FIXTURE_PORT }, "session.protocol"],
        [{ protocol: "openai-chat", port: 0 }, "session.port"],
        [{ protocol: "openai-chat", port: 80 }, "session.port"],
        [{ protocol: "openai-chat", port: 65536 }, "session.port"],
        [{ protocol: "openai-chat", port: 9090.5 }, "session.port"],
        [{ protocol: "openai-chat" }, "session.port"],
        [{ protocol: "openai-chat", port: OPENAI_CHAT_FIXTURE_PORT, path: "/x" }, "session"],
      ] as const) {
        const res = await system.call("PUT", `${NS}/agentruntimes/${RUNTIME}`, runtimeWith(bad));
        expect(res.status, JSON.stringify(res.body)).toBe(400);
        expect(res.body.code).toBe("INVALID_ARGUMENT");
        expect(res.body.message).toContain(field);
      }
      expect((await system.call("GET", `${NS}/agentruntimes/${RUNTIME}`)).status).toBe(404);
    });

    it("created, asked, streamed, asked by the openai client, stopped and resumed with its conversation", async () => {
      const put = await system.call(
        "PUT",
        `${NS}/agentruntimes/${RUNTIME}`,
        runtimeWith({ protocol: "openai-chat", port: OPENAI_CHAT_FIXTURE_PORT }),
      );
      expect(put.status, JSON.stringify(put.body)).toBe(201);
      const agent = await system.call("PUT", `${NS}/agents/${NAME}`, {
        apiVersion: API_VERSION,
        kind: "Agent",
        metadata: { name: NAME },
        spec: {
          runtimeRef: RUNTIME,
          credentials: [{ name: "MODEL_API_KEY", secretRef: { env: "E2E_MODEL_KEY" } }],
          model: { baseUrl: model.url, name: "tiny" },
          egress: [],
        },
      });
      expect(agent.status, JSON.stringify(agent.body)).toBe(201);
      const created = await system.call("PUT", `${SESSIONS}/${NAME}`, {
        apiVersion: API_VERSION,
        kind: "HarnessSession",
        metadata: { name: NAME },
        spec: { agentRef: NAME },
      });
      expect(created.status, JSON.stringify(created.body)).toBe(201);
      const ready = await phase("Ready");
      const sessionId = ready.status.sessionId;

      // Asked through our request API: the harness's answer as our result record.
      const told = await ask(`remember ${TOKEN}`);
      expect(told.status, JSON.stringify(told.body)).toBe(200);
      expect(told.body).toMatchObject({ outcome: "succeeded", output: `OK, I will remember ${TOKEN}.` });

      // Streamed: deltas, then the result; the harness sent the whole conversation to the model.
      const res = await fetch(`${system.url}${SESSIONS}/${NAME}/requests`, {
        method: "POST",
        headers: { authorization: `Bearer ${system.adminToken}`, "content-type": "application/json" },
        body: JSON.stringify({ input: "what token did I give you?", stream: true }),
      });
      expect(res.status).toBe(200);
      const events = [];
      for await (const e of sseEvents(res.body as ReadableStream<Uint8Array>)) events.push(e);
      const deltas = events.filter((e) => e.event === "delta");
      expect(deltas.length).toBeGreaterThanOrEqual(2);
      expect(deltas.map((e) => e.data.text).join("")).toBe(`The token is ${TOKEN}.`);
      expect(events.at(-1)).toMatchObject({ event: "result" });
      expect(events.at(-1)?.data.result).toMatchObject({
        outcome: "succeeded",
        output: `The token is ${TOKEN}.`,
      });

      // The official client on the session's OpenAI endpoint, streamed and not.
      const token = await system.call("POST", "/v1/tokens", {
        name: `${NAME}-openai`,
        scopes: [`session:default/${NAME}:chat`],
      });
      expect(token.status, JSON.stringify(token.body)).toBe(201);
      const openai = new OpenAI({
        baseURL: `${system.url}${SESSIONS}/${NAME}/openai/v1`,
        apiKey: token.body.token,
        maxRetries: 0,
        timeout: 120_000,
      });
      const completion = await openai.chat.completions.create({
        model: "tiny",
        messages: [{ role: "user", content: "what token did I give you?" }],
      });
      expect(completion.choices[0]?.message.content).toBe(`The token is ${TOKEN}.`);
      // The gateway's count of the model calls the harness made.
      expect(completion.usage?.prompt_tokens ?? 0).toBeGreaterThan(0);
      const stream = await openai.chat.completions.create({
        model: "tiny",
        messages: [{ role: "user", content: "what token did I give you?" }],
        stream: true,
        stream_options: { include_usage: true },
      });
      let text = "";
      for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? "";
      expect(text).toBe(`The token is ${TOKEN}.`);
      expect((await session()).status).toMatchObject({ requestCount: 4, activeRequests: 0, errorCount: 0 });

      // Stopped: the workload goes, the volume stays; resumed: the same session, the conversation kept.
      expect(
        (await system.call("PATCH", `${SESSIONS}/${NAME}`, { spec: { desiredState: "stopped" } })).status,
      ).toBe(200);
      await phase("Stopped");
      expect((await ask("anyone there?")).body).toMatchObject({ code: "FAILED_PRECONDITION" });
      expect(
        (await system.call("PATCH", `${SESSIONS}/${NAME}`, { spec: { desiredState: "running" } })).status,
      ).toBe(200);
      const resumed = await phase("Ready");
      expect(resumed.status.sessionId).toBe(sessionId);
      const recalled = await ask("what token did I give you?");
      expect(recalled.status, JSON.stringify(recalled.body)).toBe(200);
      expect(recalled.body.output).toBe(`The token is ${TOKEN}.`);
    });

    it("a runner killed and started again still reaches it: its port and protocol are not lost, nor its conversation", async () => {
      await system.kill("runner");
      await system.startRunner(["--engine", options.engine]);
      await phase("Ready");
      const recalled = await ask("what token did I give you?");
      expect(recalled.status, JSON.stringify(recalled.body)).toBe(200);
      expect(recalled.body.output).toBe(`The token is ${TOKEN}.`);
    });

    if (options.engine === "docker")
      it("paused (the workload frozen), a request wakes it and the harness answers", async () => {
        const paused = await system.call("PATCH", `${SESSIONS}/${NAME}`, {
          spec: { desiredState: "paused" },
        });
        expect(paused.status, JSON.stringify(paused.body)).toBe(200);
        await phase("Paused");
        const woken = await ask("what token did I give you?");
        expect(woken.status, JSON.stringify(woken.body)).toBe(200);
        expect(woken.body.output).toBe(`The token is ${TOKEN}.`);
        const running = await system.call("PATCH", `${SESSIONS}/${NAME}`, {
          spec: { desiredState: "running" },
        });
        expect(running.status).toBe(200);
        await phase("Ready");
      });

    it("deleted: gone", async () => {
      const deleted = await system.call("DELETE", `${SESSIONS}/${NAME}`);
      expect([200, 202], JSON.stringify(deleted.body)).toContain(deleted.status);
      await until(
        `${NAME} gone`,
        async () => ((await system.call("GET", `${SESSIONS}/${NAME}`)).status === 404 ? true : undefined),
        READY_MS,
      );
    });
  });
}
