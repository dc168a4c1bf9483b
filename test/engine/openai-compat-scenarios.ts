/**
 * A session's OpenAI-compatible API end to end (issue 41), real parts only, the engine a
 * parameter: `serve --no-runner`, a `runner` process, real Pulumi stacks, the four shipped
 * runtimes' images and the loopback model server (test/fixtures/model-replies.ts decides its
 * answers from the history an agent sends it). The official `openai` npm client, given the
 * session's base URL and a chat token and nothing else, asks each runtime a non-streamed turn
 * and a streamed one with `include_usage`: the answers are the agent's, the usage the gateway's,
 * and the session keeps its own conversation whatever history the client sends.
 */
import { randomBytes } from "node:crypto";
import OpenAI from "openai";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { API_VERSION } from "../../contracts/resources.ts";
import type { ModelServer } from "../fixtures/model-server.ts";
import type { Engine } from "../support/engine-probes.ts";
import { type Json, System, startSessionModelServer, until, writeLogTails } from "../support/system.ts";

export type OpenAICompatScenarioOptions = {
  engine: Engine;
  /** How long provisioning to Ready may take, in seconds. @default 240 */
  readySeconds?: number;
};

const NS = "/v1/namespaces/default";
const SESSIONS = `${NS}/harnesssessions`;
const RUNTIMES = ["reference", "compass", "pi", "hermes"] as const;

export function openAICompatScenarios(options: OpenAICompatScenarioOptions): void {
  const READY_MS = (options.readySeconds ?? 240) * 1000;
  const prefix = `oa${randomBytes(2).toString("hex")}`;
  const sessionOf = (runtime: string) => `${prefix}-${runtime}`;
  let system: System;
  let model: ModelServer;

  async function ready(name: string): Promise<Json> {
    return until(
      `${name} Ready`,
      async () => {
        const s = (await system.call("GET", `${SESSIONS}/${name}`)).body;
        if (s.status?.phase === "Failed") throw new Error(`${name} failed: ${JSON.stringify(s.status)}`);
        return s.status?.phase === "Ready" ? s : undefined;
      },
      READY_MS,
    );
  }

  /** The official client as a portal would make it: the session's base URL and a chat token. */
  async function clientOf(name: string): Promise<OpenAI> {
    const token = await system.call("POST", "/v1/tokens", {
      name: `${name}-openai-${randomBytes(3).toString("hex")}`,
      scopes: [`session:default/${name}:chat`],
    });
    expect(token.status, JSON.stringify(token.body)).toBe(201);
    return new OpenAI({
      baseURL: `${system.url}${SESSIONS}/${name}/openai/v1`,
      apiKey: token.body.token,
      maxRetries: 0,
      timeout: 180_000,
    });
  }

  beforeAll(async () => {
    model = await startSessionModelServer(options.engine);
    process.env.E2E_MODEL_KEY = `sk-${randomBytes(8).toString("hex")}`;
    system = new System();
    await system.startServer();
    await system.startRunner(["--engine", options.engine]);
    for (const runtime of RUNTIMES) {
      const name = sessionOf(runtime);
      const put = await system.call("PUT", `${NS}/agents/${name}`, {
        apiVersion: API_VERSION,
        kind: "Agent",
        metadata: { name },
        spec: {
          runtimeRef: runtime,
          credentials: [{ name: "MODEL_API_KEY", secretRef: { env: "E2E_MODEL_KEY" } }],
          model: { baseUrl: model.url, name: "tiny" },
          egress: [],
        },
      });
      expect(put.status, JSON.stringify(put.body)).toBe(201);
    }
  }, 120_000);

  afterEach((context) => {
    if (context.task.result?.state === "fail") writeLogTails(system);
  });

  afterAll(async () => {
    for (const runtime of RUNTIMES)
      await system?.call("DELETE", `${SESSIONS}/${sessionOf(runtime)}`).catch(() => undefined);
    await system?.stop();
    await model?.close();
  });

  describe(`the OpenAI-compatible API of a session (real engine: ${options.engine})`, () => {
    for (const runtime of RUNTIMES)
      it(`${runtime}: the official openai client chats, streamed and not, and the session keeps its own conversation`, async () => {
        const name = sessionOf(runtime);
        const put = await system.call("PUT", `${SESSIONS}/${name}`, {
          apiVersion: API_VERSION,
          kind: "HarnessSession",
          metadata: { name },
          spec: { agentRef: name },
        });
        expect([200, 201], JSON.stringify(put.body)).toContain(put.status);
        await ready(name);
        const openai = await clientOf(name);

        expect((await openai.models.list()).data.map((m) => m.id)).toEqual([name]);

        const secret = `tok-${runtime}-${randomBytes(3).toString("hex")}`;
        const completion = await openai.chat.completions.create({
          model: "tiny",
          messages: [{ role: "user", content: `remember ${secret}` }],
        });
        expect(completion.object).toBe("chat.completion");
        expect(completion.choices[0]?.message.content).toContain(`OK, I will remember ${secret}.`);
        expect(completion.choices[0]?.finish_reason).toBe("stop");
        // The gateway's count of the turn's model calls.
        expect(completion.usage?.prompt_tokens ?? 0).toBeGreaterThan(0);
        expect(completion.usage?.completion_tokens ?? 0).toBeGreaterThan(0);

        // The client's history says another token: only its last user message is the turn, and
        // the agent answers from the conversation the session kept.
        const stream = await openai.chat.completions.create({
          model: "tiny",
          messages: [
            { role: "user", content: "remember not-this-one" },
            { role: "assistant", content: "OK, I will remember not-this-one." },
            { role: "user", content: [{ type: "text", text: "what token did I give you?" }] },
          ],
          stream: true,
          stream_options: { include_usage: true },
        });
        let text = "";
        let usage: OpenAI.CompletionUsage | null | undefined;
        let finish: string | null | undefined;
        let chunks = 0;
        for await (const chunk of stream) {
          chunks++;
          expect(chunk.object).toBe("chat.completion.chunk");
          text += chunk.choices[0]?.delta.content ?? "";
          finish = chunk.choices[0]?.finish_reason ?? finish;
          if (chunk.usage) usage = chunk.usage;
        }
        expect(chunks).toBeGreaterThanOrEqual(3);
        expect(text).toContain(`The token is ${secret}.`);
        expect(finish).toBe("stop");
        expect(usage?.prompt_tokens ?? 0).toBeGreaterThan(0);
        expect(usage?.total_tokens).toBe((usage?.prompt_tokens ?? 0) + (usage?.completion_tokens ?? 0));

        // Counted like any request of the session.
        const status = (await system.call("GET", `${SESSIONS}/${name}`)).body.status;
        expect(status).toMatchObject({ requestCount: 2, lastRequestOutcome: "succeeded", activeRequests: 0 });

        // Bad input reaches nobody: OpenAI's error, through the official client.
        await expect(
          openai.chat.completions.create({ model: "tiny", messages: [{ role: "user", content: "x" }], n: 2 }),
        ).rejects.toThrow(OpenAI.BadRequestError);
        await system.call("DELETE", `${SESSIONS}/${name}`);
      });
  });
}
