/**
 * The model gateway end to end (issue 35), real parts only, the engine a parameter: `serve
 * --no-runner`, a `runner` process, real Pulumi stacks, the four shipped runtimes' images and the
 * loopback model server. A provider key planted in the server's environment must reach the model
 * server, exactly, and appear nowhere a session or its reader can see: not in any process of the
 * workload, its volume (harness transcripts included, read back with a chat token), what the
 * engine was told (container / pod spec, network, Secret), the stack's state or the logs. The
 * sessions' Agents allow no route to the model at all: the gateway is their only way to it.
 * Then what the gateway checks: tokens die with the workload, a path outside the Agent's endpoint
 * and a model outside its list are refused, usage on status is the model server's whatever the
 * adapter says, and a spent budget is a 429 with an event.
 */
import { randomBytes } from "node:crypto";
import { gunzipSync } from "node:zlib";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { API_VERSION } from "../../contracts/resources.ts";
import type { ModelServer } from "../fixtures/model-server.ts";
import type { Engine, EngineProbe } from "../support/engine-probes.ts";
import { backendStateText } from "../support/session-harness.ts";
import { referenceImage } from "../support/testbed.ts";
import {
  followEvents,
  type Json,
  System,
  startSessionModelServer,
  until,
  writeLogTails,
} from "../support/system.ts";

export type ModelGatewayScenarioOptions = {
  engine: Engine;
  probe: () => EngineProbe | Promise<EngineProbe>;
  /** How long provisioning to Ready may take, in seconds. @default 240 */
  readySeconds?: number;
};

const NS = "/v1/namespaces/default";
const SESSIONS = `${NS}/harnesssessions`;
const RUNTIMES = ["reference", "compass", "pi", "hermes"] as const;

export function modelGatewayScenarios(options: ModelGatewayScenarioOptions): void {
  const READY_MS = (options.readySeconds ?? 240) * 1000;
  /** The planted provider key: the server reads it from its environment (secretRef). */
  const KEY = `sk-planted-${randomBytes(16).toString("hex")}`;
  const prefix = `gw${randomBytes(2).toString("hex")}`;
  const sessionOf = (runtime: string) => `${prefix}-${runtime}`;
  const LIMITED = `${prefix}-limited`;

  let system: System;
  let model: ModelServer;
  let probe: EngineProbe;
  /** Workload name by session name. */
  const workloads = new Map<string, string>();

  const agent = (name: string, runtimeRef: string, extra: Record<string, unknown> = {}) => ({
    apiVersion: API_VERSION,
    kind: "Agent",
    metadata: { name },
    spec: {
      runtimeRef,
      credentials: [{ name: "MODEL_API_KEY", secretRef: { env: "E2E_MODEL_KEY" } }],
      model: { baseUrl: model.url, name: "tiny", ...((extra.model as object) ?? {}) },
      // No route to the model: the session reaches it through the runner's gateway only.
      egress: [],
      ...(extra.limits ? { limits: extra.limits } : {}),
    },
  });

  async function session(name: string): Promise<Json> {
    const got = await system.call("GET", `${SESSIONS}/${name}`);
    if (got.status !== 200) throw new Error(`GET ${name}: ${got.status} ${JSON.stringify(got.body)}`);
    return got.body;
  }

  async function ready(name: string): Promise<Json> {
    return until(
      `${name} Ready`,
      async () => {
        const s = await session(name);
        if (s.status.phase === "Failed") throw new Error(`${name} failed: ${JSON.stringify(s.status)}`);
        return s.status.phase === "Ready" ? s : undefined;
      },
      READY_MS,
    );
  }

  async function create(name: string, agentRef: string): Promise<string> {
    const put = await system.call("PUT", `${SESSIONS}/${name}`, {
      apiVersion: API_VERSION,
      kind: "HarnessSession",
      metadata: { name },
      spec: { agentRef },
    });
    // 200: a retried test finds it made already.
    expect([200, 201], JSON.stringify(put.body)).toContain(put.status);
    const s = await ready(name);
    workloads.set(name, s.status.containerName);
    return s.status.containerName;
  }

  const ask = (name: string, input: string, token = system.adminToken) =>
    system.call("POST", `${SESSIONS}/${name}/requests`, { input }, token);

  /** The gateway's address, as the runner logged it when it started. */
  function gatewayAddress(): string {
    const logs = (system.runner?.logs ?? []).join("");
    const address = logs.match(/model gateway listening[^\n]*"address":"([\d.]+:\d+)"/)?.[1];
    if (!address) throw new Error("the runner did not log its model gateway's address");
    return address;
  }

  /** The session's gateway token and path, from its workload's environment. */
  async function gatewayToken(workload: string): Promise<{ token: string; path: string }> {
    const env = await probe.processEnv(workload);
    const token = env.find((e) => e.startsWith("MODEL_API_KEY="))?.slice("MODEL_API_KEY=".length) ?? "";
    const url = env.find((e) => e.startsWith("MODEL_BASE_URL="))?.slice("MODEL_BASE_URL=".length) ?? "";
    return { token, path: new URL(url).pathname.replace(/\/$/, "") };
  }

  /** A model call straight to the gateway, as an agent's tool would make it. */
  async function callGateway(token: string, path: string, body: Record<string, unknown>) {
    const res = await fetch(`http://${gatewayAddress()}${path}`, {
      method: "POST",
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
      body: JSON.stringify(body),
    });
    return { status: res.status, text: await res.text() };
  }

  beforeAll(async () => {
    probe = await options.probe();
    model = await startSessionModelServer(options.engine);
    process.env.E2E_MODEL_KEY = KEY;
    system = new System();
    await system.startServer();
    await system.startRunner(["--engine", options.engine]);
    for (const runtime of RUNTIMES) {
      const put = await system.call(
        "PUT",
        `${NS}/agents/${sessionOf(runtime)}`,
        agent(sessionOf(runtime), runtime),
      );
      expect(put.status, JSON.stringify(put.body)).toBe(201);
    }
    const limited = await system.call(
      "PUT",
      `${NS}/agents/${LIMITED}`,
      agent(LIMITED, "reference", { model: { allowedModels: ["tiny"] }, limits: { tokensPerDay: 40 } }),
    );
    expect(limited.status, JSON.stringify(limited.body)).toBe(201);
  }, 120_000);

  afterEach((context) => {
    if (context.task.result?.state === "fail") writeLogTails(system);
  });

  afterAll(async () => {
    probe?.close();
    for (const name of [...RUNTIMES.map(sessionOf), LIMITED])
      await system?.call("DELETE", `${SESSIONS}/${name}`).catch(() => undefined);
    await system?.stop();
    await model?.close();
  });

  describe(`the model gateway (real engine: ${options.engine})`, () => {
    it("every shipped runtime answers through the gateway; the planted key reaches the model and nothing else", async () => {
      // Made one after another: four images starting at once on two cores only slow each other.
      for (const runtime of RUNTIMES) await create(sessionOf(runtime), sessionOf(runtime));
      for (const runtime of RUNTIMES) {
        const name = sessionOf(runtime);
        const reply = await ask(name, `remember gw-${runtime}`);
        expect(reply.status, `${runtime}: ${JSON.stringify(reply.body)}`).toBe(200);
        expect(reply.body.outcome, `${runtime}: ${JSON.stringify(reply.body)}`).toBe("succeeded");
      }
      // The model server saw the real key on every call, and never a gateway token.
      expect(model.authHeaders.length).toBeGreaterThanOrEqual(RUNTIMES.length);
      expect(new Set(model.authHeaders)).toEqual(new Set([`Bearer ${KEY}`]));

      const logs = () => [...(system.server?.logs ?? []), ...(system.runner?.logs ?? [])].join("");
      for (const runtime of RUNTIMES) {
        const name = sessionOf(runtime);
        const workload = workloads.get(name) ?? "";
        const where = `${runtime} (${workload})`;
        // Every process of the workload, the adapter's and the agent's and any tool's.
        const environs = await probe.exec(workload, [
          "sh",
          "-c",
          // Every process but this probe's own shell (an exec starts with the workload's environment).
          'for f in /proc/[0-9]*/environ; do [ "$f" = /proc/$$/environ ] || cat $f 2>/dev/null; echo; done',
        ]);
        expect(environs, where).toContain("MODEL_API_KEY=asgw_");
        expect(environs, where).not.toContain(KEY);
        // What the engine was told: container or pod spec, network, Secret.
        const spec = await probe.specText(workload);
        expect(spec, where).toContain("asgw_");
        expect(spec, where).not.toContain(KEY);
        // The adapter's token is the engine's to give, and no process's environment keeps it.
        const adapterToken = spec.match(/ADAPTER_TOKEN(?:=|\\?":\\?")([A-Za-z0-9_-]{20,})/)?.[1] ?? "";
        expect(adapterToken.length, where).toBeGreaterThan(20);
        expect(environs, where).not.toContain(adapterToken);
        // The volume, read back as a portal's browser would: with the session's chat token.
        const chat = await system.call("POST", "/v1/tokens", {
          name: `${name}-chat-${randomBytes(3).toString("hex")}`,
          scopes: [`session:default/${name}:chat`],
        });
        expect(chat.status).toBe(201);
        const archive = await fetch(`${system.url}${SESSIONS}/${name}/workspace:archive?path=.`, {
          headers: { authorization: `Bearer ${chat.body.token}` },
        });
        if (archive.status !== 200)
          throw new Error(`${where}: archive ${archive.status} ${await archive.text()}`);
        let bytes = Buffer.from(await archive.arrayBuffer());
        if (bytes[0] === 0x1f && bytes[1] === 0x8b) bytes = gunzipSync(bytes);
        expect(bytes.length, where).toBeGreaterThan(0);
        expect(bytes.includes(KEY), `${where}: the key is on the volume`).toBe(false);
        // Nothing a chat token reads carries it either.
        const read = await system.call("GET", `${SESSIONS}/${name}`, undefined, chat.body.token);
        expect(JSON.stringify(read.body)).not.toContain(KEY);
      }
      // The stacks' state and settings, and every log line of server and runner.
      expect(backendStateText(`${system.dataDir}/runner`)).not.toContain(KEY);
      expect(logs()).not.toContain(KEY);
    });

    // One-shot AgentRuns are placed on Docker runners only (proxy/harness/agent-runs.ts).
    if (options.engine === "docker")
      it("a one-shot run whose command prints every environment it can read finds gateway tokens, never the key", async () => {
        // What a namespace editor could write: a v1alpha1 runtime whose entry dumps the environment.
        const runtime = await system.call("PUT", `${NS}/agentruntimes/${prefix}-dump`, {
          apiVersion: API_VERSION,
          kind: "AgentRuntime",
          metadata: { name: `${prefix}-dump` },
          spec: {
            image: referenceImage().image,
            contract: "v1alpha1",
            command: [
              "/bin/sh",
              "-c",
              'for f in /proc/[0-9]*/environ; do cat $f; echo; done 2>/dev/null | tr "\\0" "\\n"',
            ],
          },
        });
        expect(runtime.status, JSON.stringify(runtime.body)).toBe(201);
        const dumper = await system.call(
          "PUT",
          `${NS}/agents/${prefix}-dump`,
          agent(`${prefix}-dump`, `${prefix}-dump`),
        );
        expect(dumper.status, JSON.stringify(dumper.body)).toBe(201);
        const run = await system.call("POST", `${NS}/agentruns`, {
          apiVersion: API_VERSION,
          kind: "AgentRun",
          metadata: { name: `${prefix}-dump-1` },
          spec: { agentRef: `${prefix}-dump`, input: "print" },
        });
        expect(run.status, JSON.stringify(run.body)).toBe(201);
        expect(run.body.status.output).toContain("MODEL_API_KEY=asgw_");
        expect(JSON.stringify(run.body)).not.toContain(KEY);
        const logs = [...(system.server?.logs ?? []), ...(system.runner?.logs ?? [])].join("");
        expect(logs).not.toContain(KEY);
      });

    it("usage on status is what the model server reported, counted by the gateway", async () => {
      const name = sessionOf("reference");
      const before = (await session(name)).status.usage;
      const reply = await ask(name, "count these five words please");
      expect(reply.status).toBe(200);
      expect(reply.body.usage).toMatchObject({ source: "gateway" });
      const after = await until(`${name} usage counted`, async () => {
        const s = (await session(name)).status;
        return s.usage.reportedRequests > before.reportedRequests ? s : undefined;
      });
      expect(after.usage.source).toBe("gateway");
      expect(after.usage.inputTokens - before.inputTokens).toBe(reply.body.usage.input_tokens);
      expect(after.usage.outputTokens - before.outputTokens).toBe(reply.body.usage.output_tokens);
      // A model call the adapter never reports (an agent's tool calling the gateway itself) is counted too.
      const { token, path } = await gatewayToken(workloads.get(name) ?? "");
      const direct = await callGateway(token, `${path}/chat/completions`, {
        model: "tiny",
        messages: [{ role: "user", content: "one two three" }],
      });
      expect(direct.status, direct.text).toBe(200);
      const reported = JSON.parse(direct.text).usage;
      const counted = await until(`${name} direct call counted`, async () => {
        const s = (await session(name)).status;
        return s.usage.reportedRequests > after.usage.reportedRequests ? s : undefined;
      });
      expect(counted.usage.inputTokens - after.usage.inputTokens).toBe(reported.prompt_tokens);
      expect(counted.usage.outputTokens - after.usage.outputTokens).toBe(reported.completion_tokens);
    });

    it("a token is refused outside its Agent's endpoint, and after its session stops", async () => {
      const name = sessionOf("hermes");
      const { token, path } = await gatewayToken(workloads.get(name) ?? "");
      const body = { model: "tiny", messages: [{ role: "user", content: "hi" }] };
      expect((await callGateway(token, `${path}/chat/completions`, body)).status).toBe(200);
      // Only the Agent's own endpoint: another path is no way to another upstream.
      expect((await callGateway(token, "/elsewhere/v1/chat/completions", body)).status).toBe(404);
      // A made-up token is nobody's.
      expect(
        (await callGateway(`asgw_${randomBytes(32).toString("base64url")}`, `${path}/chat/completions`, body))
          .status,
      ).toBe(401);
      const stop = await system.call("PATCH", `${SESSIONS}/${name}`, { spec: { desiredState: "stopped" } });
      expect(stop.status).toBe(200);
      await until(
        `${name} Stopped`,
        async () => ((await session(name)).status.phase === "Stopped" ? true : undefined),
        READY_MS,
      );
      const after = await callGateway(token, `${path}/chat/completions`, body);
      expect(after.status).toBe(401);
      expect(after.text).not.toContain(token);
    });

    it("a model outside the Agent's list is refused; a spent token budget is a 429 with an event", async () => {
      const workload = await create(LIMITED, LIMITED);
      const events = followEvents(system);
      try {
        const { token, path } = await gatewayToken(workload);
        const other = await callGateway(token, `${path}/chat/completions`, {
          model: "not-tiny",
          messages: [{ role: "user", content: "hi" }],
        });
        expect(other.status).toBe(403);
        expect(other.text).toContain("not-tiny");
        // 40 tokens a day: a few requests spend them; the next model call is refused.
        let refused: Json;
        for (let i = 0; i < 10 && !refused; i++) {
          const reply = await ask(LIMITED, `spend some tokens on request number ${i} of this budget test`);
          if (reply.body.outcome !== "succeeded") refused = reply.body;
        }
        expect(refused, "no request was refused within 10").toBeDefined();
        const direct = await callGateway(token, `${path}/chat/completions`, {
          model: "tiny",
          messages: [{ role: "user", content: "hi" }],
        });
        expect(direct.status).toBe(429);
        expect(JSON.parse(direct.text).error.message).toMatch(/tokens/);
        const event = await until("a TokenBudgetExceeded event", () =>
          events.events.find((e) => JSON.stringify(e.data).includes("TokenBudgetExceeded")),
        );
        expect(JSON.stringify(event.data)).toContain(LIMITED);
        expect(JSON.stringify(event.data)).not.toContain(KEY);
      } finally {
        await events.close();
      }
    });
  });
}
