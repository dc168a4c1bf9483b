/**
 * The HarnessSession scenarios end to end, real parts only, with the engine as a parameter:
 * `serve --no-runner` and a `runner` process (`--engine docker|kubernetes`) over the real
 * WebSocket, real Pulumi stacks, the reference image (v1alpha2 adapter and agent) talking to the
 * loopback model server on our bridge (10.213.0.1: a Docker session's gateway, and the node a
 * Kubernetes pod reaches). What is checked on the engine itself goes through an EngineProbe.
 *
 * One session lives through the file in order: created, asked, streamed, cancelled, stopped,
 * resumed, stopped for idleness, resumed, killed and restarted by itself, crash-looping, recovered,
 * deleted; after create, stop, resume and the restart its stack shows no drift.
 *
 * The runtime of that session is a parameter too (`runtime`, default `reference`): the scenarios
 * are about the proxy, the controller and the engine, and hold for any v1alpha2 runtime, so their
 * assertions are runtime-neutral. Replies are the loopback model server's (deterministic, from the
 * history it is sent: "echo: …", "OK, I will remember X.", "The token is X."), whatever harness
 * asked; output tokens are counted from the reply, input tokens from everything the harness sent
 * (a real harness adds its system prompt and tool schemas, so only the reference adapter's input
 * counts are known exactly). Which runtime each engine runs, and why (CI time: each file runs
 * once): harness-sessions.docker.test.ts runs them on Docker with `compass` (our Oh My Pi agent), the
 * Kubernetes file with `reference`; the seed-004 suites are split the other way round
 * (agent-lifecycle-scenarios.ts). The Bad-input bindings (v1alpha1, unknown Agent, unlisted
 * credential) and the one-shot AgentRun stay on the reference image: they never start a session.
 */
import { randomBytes } from "node:crypto";
import { existsSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import type { ModelServer } from "../fixtures/model-server.ts";
import { type Engine, type EngineProbe, objectsGone } from "../support/engine-probes.ts";
import { backendStateText, dockerClient } from "../support/session-harness.ts";
import { type Json, System, startSessionModelServer, until, writeLogTails } from "../support/system.ts";
import { builtImage, referenceImage, repoRoot } from "../support/testbed.ts";
import { modelAgent } from "../fixtures/agent-manifest.ts";

/** Runtimes whose image the test bed builds (`<runtime>-image`) and `serve` registers in `default`. */
export type SessionRuntime = "reference" | "compass" | "pi" | "hermes";

export type HarnessScenarioOptions = {
  /** The runner's engine (`runner --engine …`). */
  engine: Engine;
  /** The engine's probe, made once the test bed is up. */
  probe: () => EngineProbe | Promise<EngineProbe>;
  /** The session's name (its workload, stack and Pulumi config file are named after it). */
  sessionName?: string;
  /** How long provisioning to Ready may take, in seconds. */
  readySeconds?: number;
  /** The AgentRuntime of the session the scenarios live through. @default "reference" */
  runtime?: SessionRuntime;
};

const API = "agent-sessions.dev/v1alpha1";
const NS = "/v1/namespaces/default";
const SESSIONS = `${NS}/harnesssessions`;

type Sse = { event: string; data: Json; at: number };

export function harnessSessionScenarios(options: HarnessScenarioOptions): void {
  const CHAT = options.sessionName ?? "chat";
  const LEGACY = `${CHAT}-legacy`;
  /** A session bound to an Agent that does not exist. */
  const ORPHAN = `${CHAT}-orphan`;
  const READY_S = options.readySeconds ?? 180;
  const RUNTIME = options.runtime ?? "reference";
  /** Only the reference adapter sends the model nothing but the conversation (word counts known). */
  const EXACT_INPUT = RUNTIME === "reference";
  /** Restarts in a row the server allows before CrashLoop. */
  const RESTART_LIMIT = 2;
  const TOKEN = `tok-${randomBytes(4).toString("hex")}`;
  /** The provider credential the Agent allows, read by the server from its environment. */
  const SECRET = `sk-e2e-${randomBytes(12).toString("hex")}`;
  /**
   * A secret in the server's environment that the server does not offer to sessions (not in
   * AGENT_SESSIONS_CREDENTIAL_ENV, see system.ts): it must never reach a session, even when an
   * Agent names it.
   */
  const UNLISTED = `sk-unlisted-${randomBytes(12).toString("hex")}`;

  let system: System;
  let model: ModelServer;
  let probe: EngineProbe;
  /** The session's workload (its volume and other objects are named after it). */
  let container = "";
  let sessionId = "";
  const timings: Record<string, number> = {};
  const timed = async <T>(what: string, fn: () => Promise<T>): Promise<T> => {
    const started = Date.now();
    try {
      return await fn();
    } finally {
      timings[what] = Date.now() - started;
    }
  };
  async function session(name = CHAT): Promise<Json> {
    const got = await system.call("GET", `${SESSIONS}/${name}`);
    if (got.status !== 200) throw new Error(`GET ${name}: ${got.status} ${JSON.stringify(got.body)}`);
    return got.body;
  }

  async function phase(want: string, name = CHAT, seconds = READY_S): Promise<Json> {
    return until(
      `${name} ${want}`,
      async () => {
        const s = await session(name);
        return s.status.phase === want ? s : undefined;
      },
      seconds * 1000,
    );
  }

  /** Ready again after its `count`th restart (a stale Ready from before the exit does not count). */
  async function restarted(count: number, seconds = READY_S): Promise<Json> {
    return until(
      `${CHAT} Ready after restart ${count}`,
      async () => {
        const s = await session();
        return s.status.phase === "Ready" && s.status.restartCount >= count ? s : undefined;
      },
      seconds * 1000,
    );
  }

  /**
   * The session stack is the declaration of record: once an operation settled, a refreshed
   * `pulumi preview` of it (`agent-sessions policy check --expect-no-changes --refresh`) finds
   * the engine as declared and proposes no change.
   */
  async function expectNoDrift(after: string): Promise<void> {
    const run = await timed(`drift check after ${after}`, () =>
      system.runCli([
        "policy",
        "check",
        "-s",
        stackName(),
        "--expect-no-changes",
        "--refresh",
        "--data-dir",
        system.dataDir,
      ]),
    );
    expect(run.stdout, `after ${after}: ${run.stdout}${run.stderr.slice(-2000)}`).toContain(
      `${stackName()}: no policy violations, no changes (refreshed)`,
    );
    expect(run.code).toBe(0);
  }

  const ask = (body: Record<string, unknown>) => system.call("POST", `${SESSIONS}/${CHAT}/requests`, body);

  /** A streamed request; events with their arrival time (ms since the request). */
  async function askStreamed(
    body: Record<string, unknown>,
    options: { signal?: AbortSignal; onEvent?: (e: Sse) => void } = {},
  ): Promise<{ status: number; events: Sse[] }> {
    const started = Date.now();
    const res = await fetch(`${system.url}${SESSIONS}/${CHAT}/requests`, {
      method: "POST",
      headers: { authorization: `Bearer ${system.adminToken}`, "content-type": "application/json" },
      body: JSON.stringify({ ...body, stream: true }),
      ...(options.signal ? { signal: options.signal } : {}),
    });
    const events: Sse[] = [];
    if (!res.ok || !res.body) return { status: res.status, events };
    const decoder = new TextDecoder();
    let buffer = "";
    try {
      for await (const piece of res.body as unknown as AsyncIterable<Uint8Array>) {
        buffer += decoder.decode(piece, { stream: true });
        for (let i = buffer.indexOf("\n\n"); i >= 0; i = buffer.indexOf("\n\n")) {
          const block = buffer.slice(0, i);
          buffer = buffer.slice(i + 2);
          const event: Sse = {
            event: block.match(/^event: (.*)$/m)?.[1] ?? "message",
            data: JSON.parse(block.match(/^data: (.*)$/m)?.[1] ?? "null"),
            at: Date.now() - started,
          };
          events.push(event);
          options.onEvent?.(event);
        }
      }
    } catch (error) {
      if (!options.signal?.aborted) throw error;
    }
    return { status: res.status, events };
  }

  /** The adapter's own result records on the session volume (what reached the adapter, and how it ended). */
  async function adapterResults(): Promise<{ id: string; outcome: string }[]> {
    const output = await probe.readFile(container, "/workspace/results.ndjson");
    return output
      .split("\n")
      .filter((l) => l.trim().startsWith("{"))
      .map((l) => JSON.parse(l) as { id: string; outcome: string });
  }

  const stackName = () => `default--${container.replace(/^as-default-/, "")}`;
  const runnerDataDir = () => join(system.dataDir, "runner");

  beforeAll(async () => {
    probe = await options.probe();
    model = await startSessionModelServer(options.engine);
    process.env.E2E_MODEL_KEY = SECRET;
    process.env.E2E_UNLISTED_SECRET = UNLISTED;
    system = new System(undefined, {
      // Quick restarts, and a CrashLoop after a few (the crash-loop test kills it that often).
      AGENT_SESSIONS_RESTART_BACKOFF_MS: "200",
      AGENT_SESSIONS_RESTART_LIMIT: String(RESTART_LIMIT),
    });
    await system.startServer();
    await system.startRunner(["--engine", options.engine]);
    const agent = await system.call(
      "PUT",
      `${NS}/agents/assistant`,
      modelAgent("assistant", model, { runtimeRef: RUNTIME }),
    );
    expect(agent.status).toBe(201);
    // The same image's one-shot entry, declared as a v1alpha1 runtime.
    const oneShot = await system.call("PUT", `${NS}/agentruntimes/oneshot`, {
      apiVersion: API,
      kind: "AgentRuntime",
      metadata: { name: "oneshot" },
      spec: {
        image: referenceImage().image,
        contract: "v1alpha1",
        approved: true,
        command: ["/bin/node", "/app/runtimes/reference/one-shot.ts"],
      },
    });
    expect(oneShot.status).toBe(201);
    const runAgent = await system.call(
      "PUT",
      `${NS}/agents/runner-agent`,
      modelAgent("runner-agent", model, { runtimeRef: "oneshot" }),
    );
    expect(runAgent.status).toBe(201);
  });

  const logs: { server: string[]; runner: string[] } = { server: [], runner: [] };
  afterEach((context) => {
    for (const which of ["server", "runner"] as const)
      if (system?.[which]?.logs && logs[which] !== system[which]?.logs)
        logs[which] = system[which]?.logs ?? [];
    // A failure in a real system is read from its processes' logs: show their tails.
    if (context.task.result?.state !== "fail") return;
    writeLogTails(system);
  });

  afterAll(async () => {
    probe?.close(); // only the pod watch: the probe's other checks still answer
    // Best effort: never leave a stack behind a failed run.
    for (const name of [CHAT, LEGACY, ORPHAN])
      await system?.call("DELETE", `${SESSIONS}/${name}`).catch(() => undefined);
    await system?.stop();
    await model?.close();
    // The whole logs, for reading a failure past the tails afterEach shows.
    for (const which of ["server", "runner"] as const)
      if (logs[which].length) writeFileSync(join(system.dataDir, `${which}.log`), logs[which].join(""));
    console.log(`harness scenarios on ${options.engine}: logs in ${system?.dataDir}`);
    console.log(`harness scenarios on ${options.engine}: timings (ms) ${JSON.stringify(timings)}`);
  });

  describe(`HarnessSessions through the proxy (real engine: ${options.engine})`, () => {
    it("a new session becomes Ready with the image digest the engine ran", async () => {
      const created = await system.call("PUT", `${SESSIONS}/${CHAT}`, {
        apiVersion: API,
        kind: "HarnessSession",
        metadata: { name: CHAT },
        spec: { agentRef: "assistant", runtimeRef: RUNTIME, desiredState: "running", idleTimeout: "10m" },
      });
      expect(created.status).toBe(201);
      expect(created.body.status.phase).toBe("Pending");
      const ready = await timed("create→Ready", () => phase("Ready"));
      expect(ready.status.resolvedImageDigest).toBe(builtImage(`${RUNTIME}-image`).digest);
      expect(ready.status.conditions).toEqual([
        expect.objectContaining({ type: "Ready", status: "True", reason: "SessionReady" }),
      ]);
      container = ready.status.containerName;
      sessionId = ready.status.sessionId;
      expect(sessionId).toMatch(/^ses-/);
      expect(await probe.running(container)).toBe(true);
      await expectNoDrift("create");
    });

    it("a request through the proxy remembers a token, with the usage from the model's reply", async () => {
      const told = await ask({ input: `remember ${TOKEN}`, id: "remember-1" });
      expect(told.status).toBe(200);
      // The model server counts words: 5 out; 2 in from the reference adapter (the message alone),
      // more from a harness that adds its system prompt and tools.
      expect(told.body).toMatchObject({
        id: "remember-1",
        outcome: "succeeded",
        output: `OK, I will remember ${TOKEN}.`,
        usage: { output_tokens: 5 },
      });
      const toldIn = told.body.usage.input_tokens as number;
      if (EXACT_INPUT) expect(toldIn).toBe(2);
      else expect(toldIn).toBeGreaterThan(2);
      const recalled = await ask({ input: "what token did I give you?", id: "recall-1" });
      expect(recalled.status).toBe(200);
      expect(recalled.body.output).toBe(`The token is ${TOKEN}.`);
      // The whole conversation went to the model: what the first request sent, its 5-word reply
      // and the 6-word question (13 from the reference adapter); 4 out.
      expect(recalled.body.usage.output_tokens).toBe(4);
      const recalledIn = recalled.body.usage.input_tokens as number;
      if (EXACT_INPUT) expect(recalledIn).toBe(13);
      else expect(recalledIn).toBeGreaterThanOrEqual(toldIn + 5 + 6);
      expect((await session()).status).toMatchObject({
        requestCount: 2,
        activeRequests: 0,
        errorCount: 0,
        lastRequestId: "recall-1",
        lastRequestOutcome: "succeeded",
        usage: {
          inputTokens: toldIn + recalledIn,
          outputTokens: 9,
          reportedRequests: 2,
          unavailableRequests: 0,
        },
      });
    });

    it("a streamed reply passes through incrementally, ending with its result", async () => {
      const words = "one two three four five six seven eight nine ten";
      const { status, events } = await askStreamed({ input: `[slow] ${words}`, id: "stream-1" });
      expect(status).toBe(200);
      const deltas = events.filter((e) => e.event === "delta");
      const result = events.at(-1);
      expect(deltas.length).toBeGreaterThan(5);
      expect(deltas.map((d) => d.data.text).join("")).toBe(`echo: ${words}`);
      expect(result).toMatchObject({
        event: "result",
        data: { type: "result", result: { outcome: "succeeded" } },
      });
      // The model sends a word every 200 ms: the first delta arrives well before the end.
      expect((result?.at ?? 0) - (deltas[0]?.at ?? 0)).toBeGreaterThan(1_000);
      expect((await session()).status).toMatchObject({
        lastRequestId: "stream-1",
        lastRequestOutcome: "succeeded",
      });
    });

    it("a client's cancel ends an in-flight request as cancelled", async () => {
      const words = Array.from({ length: 40 }, (_, i) => `w${i}`).join(" ");
      let first!: () => void;
      const firstDelta = new Promise<void>((resolve) => {
        first = resolve;
      });
      const started = Date.now();
      const streaming = askStreamed(
        { input: `[slow] ${words}`, id: "cancel-1" },
        { onEvent: (e) => e.event === "delta" && first() },
      );
      await firstDelta;
      const cancel = await system.call("POST", `${SESSIONS}/${CHAT}/requests/cancel-1/cancel`);
      expect(cancel).toMatchObject({ status: 202, body: { id: "cancel-1", cancelling: true } });
      const { events } = await streaming;
      expect(Date.now() - started).toBeLessThan(6_000); // the whole reply takes 8 s
      const last = events.at(-1);
      expect(
        (last?.event === "result" && last.data.result.outcome === "cancelled") ||
          (last?.event === "error" && last.data.code === "CANCELLED"),
      ).toBe(true);
      const s = await until("settled", async () => {
        const x = await session();
        return x.status.activeRequests === 0 ? x : undefined;
      });
      expect(s.status).toMatchObject({ lastRequestId: "cancel-1", lastRequestOutcome: "cancelled" });
      expect(await adapterResults()).toContainEqual(
        expect.objectContaining({ id: "cancel-1", outcome: "cancelled" }),
      );
    });

    it("a client that disconnects cancels the request upstream", async () => {
      const words = Array.from({ length: 40 }, (_, i) => `v${i}`).join(" ");
      const controller = new AbortController();
      const started = Date.now();
      await askStreamed(
        { input: `[slow] ${words}`, id: "gone-1" },
        { signal: controller.signal, onEvent: (e) => e.event === "delta" && controller.abort() },
      );
      const s = await until("cancelled upstream", async () => {
        const x = await session();
        return x.status.activeRequests === 0 && x.status.lastRequestId === "gone-1" ? x : undefined;
      });
      expect(s.status.lastRequestOutcome).toBe("cancelled");
      // The adapter itself stopped the work (its record says so), long before the 8 s reply.
      const record = await until("adapter record", async () =>
        (await adapterResults()).find((r) => r.id === "gone-1"),
      );
      expect(record.outcome).toBe("cancelled");
      expect(Date.now() - started).toBeLessThan(6_000);
    });

    it("an oversized body is refused with 413 RESOURCE_EXHAUSTED", async () => {
      const before = (await session()).status.requestCount;
      const big = await ask({ input: "x".repeat(200 * 1024) });
      expect(big.status).toBe(413);
      expect(big.body.code).toBe("RESOURCE_EXHAUSTED");
      expect((await session()).status.requestCount).toBe(before);
    });

    it("20 requests in parallel are all answered and counted exactly", async () => {
      const before = (await session()).status;
      const replies = await Promise.all(
        Array.from({ length: 20 }, (_, i) => ask({ input: `parallel ${i}`, id: `par-${i}` })),
      );
      expect(replies.map((r) => r.status)).toEqual(Array(20).fill(200));
      expect(replies.map((r) => r.body.output)).toEqual(replies.map((_, i) => `echo: parallel ${i}`));
      const after = (await session()).status;
      expect(after.requestCount).toBe(before.requestCount + 20);
      expect(after.activeRequests).toBe(0);
      expect(after.usage.reportedRequests).toBe(before.usage.reportedRequests + 20);
      const added = replies.reduce((n, r) => n + r.body.usage.output_tokens, 0);
      expect(after.usage.outputTokens).toBe(before.usage.outputTokens + added);
    });

    it("a model failure is recorded as failed and counted in errorCount", async () => {
      const before = (await session()).status.errorCount;
      const failed = await ask({ input: "[fail] please", id: "fail-1" });
      expect(failed.status).toBe(503);
      expect(failed.body).toMatchObject({ code: "UNAVAILABLE", details: { result: { outcome: "failed" } } });
      expect((await session()).status).toMatchObject({
        errorCount: before + 1,
        lastRequestId: "fail-1",
        lastRequestOutcome: "failed",
      });
    });

    it("a reply without usage is recorded as unavailable, not as zero", async () => {
      const before = (await session()).status.usage;
      const reply = await ask({ input: "[nousage] hello", id: "nousage-1" });
      expect(reply.status).toBe(200);
      expect(reply.body.usage).toBe("unavailable");
      const s = (await session()).status;
      expect(s.lastRequestUsage).toBe("unavailable");
      expect(s.usage).toEqual({
        ...before,
        unavailableRequests: before.unavailableRequests + 1,
      });
    });

    it("the session holds a gateway token in place of the Agent's credential; the credential is never in a GET, a log or the stack state", async () => {
      const env = await probe.processEnv(container);
      // The credential's name, a token of the session's own as its value (runner/gateway/).
      expect(env.find((e) => e.startsWith("MODEL_API_KEY="))).toMatch(
        /^MODEL_API_KEY=asgw_[A-Za-z0-9_-]{43}$/,
      );
      expect(env.join("\n")).not.toContain(SECRET);
      expect(env.join("\n")).not.toContain(UNLISTED);
      // The model saw the credential: the gateway put it in for the session.
      expect(model.authHeaders).toContain(`Bearer ${SECRET}`);
      const reads = [
        await system.call("GET", `${SESSIONS}/${CHAT}`),
        await system.call("GET", SESSIONS),
        await system.call("GET", `${NS}/agents/assistant`),
        await system.call("GET", `${NS}/agents`),
        await system.rpc("GetAgentStatus", {}),
      ];
      for (const read of reads) expect(JSON.stringify(read.body)).not.toContain(SECRET);
      const logs = [...(system.server?.logs ?? []), ...(system.runner?.logs ?? [])].join("");
      expect(logs.length).toBeGreaterThan(0);
      expect(logs).not.toContain(SECRET);
      // Pulumi state: secrets are ciphertext, the value never appears.
      const state = backendStateText(runnerDataDir());
      expect(state).toContain(stackName());
      expect(state).toContain("ciphertext");
      expect(state).not.toContain(SECRET);
      // The stack's settings live under the runner's data dir (0600), never beside the project.
      expect(existsSync(join(repoRoot, `Pulumi.${stackName()}.yaml`))).toBe(false);
      const settings = join(runnerDataDir(), "stack-settings", `Pulumi.${stackName()}.yaml`);
      expect(statSync(settings).mode & 0o777).toBe(0o600);
      const config = readFileSync(settings, "utf8");
      expect(config).toContain("secure:");
      expect(config).not.toContain(SECRET);
    });

    it("PATCH desiredState stopped stops the workload and keeps the volume; running again recalls the token", async () => {
      const stopping = await system.call("PATCH", `${SESSIONS}/${CHAT}`, {
        spec: { desiredState: "stopped" },
      });
      expect(stopping.status).toBe(200);
      // Every phase the status passes through, polled every 100 ms (the drain, the agent's stop and
      // the stack's scale-down take seconds, so Draining cannot slip between two polls).
      const seen: string[] = [];
      let draining: Json;
      const stopped = await timed("stop→Stopped", () =>
        until(
          `${CHAT} Stopped`,
          async () => {
            const s = await session();
            if (seen.at(-1) !== s.status.phase) seen.push(s.status.phase);
            if (s.status.phase === "Draining") draining ??= s;
            return s.status.phase === "Stopped" ? s : undefined;
          },
          120_000,
        ),
      );
      // Ready until the controller takes the patch, then Draining, then Stopped: nothing else.
      expect(seen.slice(seen[0] === "Ready" ? 1 : 0)).toEqual(["Draining", "Stopped"]);
      expect(draining.status.conditions[0]).toMatchObject({
        type: "Ready",
        status: "False",
        reason: "Stopped",
      });
      expect(draining.status.conditions[0].message).toMatch(/^draining: /);
      expect(stopped.status.conditions[0]).toMatchObject({
        type: "Ready",
        status: "False",
        reason: "Stopped",
      });
      // On Kubernetes the Deployment is at 0 when Stopped is reported; its pod may still be terminating.
      await timed("Stopped→no workload", () =>
        until(
          "workload gone, volume kept",
          () => probe.stoppedKeepingVolume(container),
          probe.stoppedWithinMs,
        ),
      );
      await expectNoDrift("stop");
      const resuming = await system.call("PATCH", `${SESSIONS}/${CHAT}`, {
        spec: { desiredState: "running" },
      });
      expect(resuming.status).toBe(200);
      const ready = await timed("resume→Ready", () => phase("Ready"));
      expect(ready.status.sessionId).toBe(sessionId);
      expect(await probe.running(container)).toBe(true);
      await expectNoDrift("resume");
      const recalled = await ask({ input: "what token did I give you?" });
      expect(recalled.status).toBe(200);
      expect(recalled.body.output).toBe(`The token is ${TOKEN}.`);
    });

    it("a short idleTimeout stops the session: Ready=False IdleTimeout, no workload, the volume kept", async () => {
      const patched = await system.call("PATCH", `${SESSIONS}/${CHAT}`, { spec: { idleTimeout: "5s" } });
      expect(patched.status).toBe(200);
      const stopped = await phase("Stopped", CHAT, 120);
      expect(stopped.status.conditions[0]).toMatchObject({
        type: "Ready",
        status: "False",
        reason: "IdleTimeout",
      });
      expect(stopped.spec.desiredState).toBe("running"); // the spec is the user's: left as written
      // On Kubernetes the Deployment is at 0 when Stopped is reported; its pod may still be terminating.
      await timed("idle Stopped→no workload", () =>
        until(
          "workload gone, volume kept",
          () => probe.stoppedKeepingVolume(container),
          probe.stoppedWithinMs,
        ),
      );
    });

    it("a request to a stopped session is refused with FAILED_PRECONDITION", async () => {
      const refused = await ask({ input: "hello?" });
      expect(refused.status).toBe(412);
      expect(refused.body).toMatchObject({
        code: "FAILED_PRECONDITION",
        details: { phase: "Stopped", reason: "IdleTimeout" },
      });
    });

    it("PATCH desiredState running resumes it, and the token is still recalled", async () => {
      const patchedAt = new Date().toISOString();
      const patched = await system.call("PATCH", `${SESSIONS}/${CHAT}`, {
        spec: { desiredState: "running", idleTimeout: "10m" },
      });
      expect(patched.status).toBe(200);
      const ready = await timed("idle resume→Ready", () => phase("Ready"));
      expect(ready.status.sessionId).toBe(sessionId);
      expect(ready.status.lastActivityTime >= patchedAt).toBe(true);
      expect(await probe.running(container)).toBe(true);
      const recalled = await ask({ input: "what token did I give you?" });
      expect(recalled.status).toBe(200);
      expect(recalled.body.output).toBe(`The token is ${TOKEN}.`);
    });

    it("a workload killed outside comes back Ready by itself (restartCount, lastExit) and recalls the token", async () => {
      const before = (await session()).status.restartCount;
      await probe.kill(container);
      const back = await timed("kill→Ready by itself", () => restarted(before + 1));
      expect(back.status.sessionId).toBe(sessionId);
      expect(back.status.lastExit.reason).toBe(probe.reasons.killed);
      expect(await probe.running(container)).toBe(true);
      await expectNoDrift("a restart after a kill");
      const recalled = await ask({ input: "what token did I give you?" });
      expect(recalled.status).toBe(200);
      expect(recalled.body.output).toBe(`The token is ${TOKEN}.`);
    });

    it("a workload that keeps crashing ends Failed/CrashLoop; a spec write recovers it, token intact", async () => {
      // The server allows RESTART_LIMIT restarts in a row; the previous test made the first.
      let count = (await session()).status.restartCount;
      for (let i = 1; i < RESTART_LIMIT; i++) {
        await probe.kill(container);
        await restarted(++count);
      }
      await probe.kill(container);
      const failed = await timed("kill→CrashLoop", () => phase("Failed", CHAT, 60));
      expect(failed.status.conditions[0]).toMatchObject({ status: "False", reason: "CrashLoop" });
      expect(failed.status.restartCount).toBe(count);
      expect((await ask({ input: "hello?" })).status).toBe(412);
      await system.call("PATCH", `${SESSIONS}/${CHAT}`, { spec: { desiredState: "running" } });
      await timed("recover→Ready", () => phase("Ready"));
      expect(await probe.running(container)).toBe(true);
      const recalled = await ask({ input: "what token did I give you?" });
      expect(recalled.body.output).toBe(`The token is ${TOKEN}.`);
    });

    it("a binding to a v1alpha1 runtime fails with reason Invalid and provisions nothing", async () => {
      const put = await system.call("PUT", `${SESSIONS}/${LEGACY}`, {
        apiVersion: API,
        kind: "HarnessSession",
        metadata: { name: LEGACY },
        spec: { agentRef: "runner-agent", runtimeRef: "oneshot" },
      });
      expect(put.status).toBe(201);
      const failed = await phase("Failed", LEGACY, 30);
      expect(failed.status.conditions[0]).toMatchObject({ status: "False", reason: "Invalid" });
      expect(failed.status.conditions[0].message).toMatch(
        /v1alpha1 \(one-shot\); sessions need a runtime that declares v1alpha2/,
      );
      expect(failed.status.containerName).toBeUndefined();
      expect(await probe.workloadsNamed("runner-agent")).toEqual([]);
      expect((await system.call("DELETE", `${SESSIONS}/${LEGACY}`)).status).toBe(200);
    });

    it("a binding to an Agent that does not exist fails with reason Invalid and provisions nothing", async () => {
      const put = await system.call("PUT", `${SESSIONS}/${ORPHAN}`, {
        apiVersion: API,
        kind: "HarnessSession",
        metadata: { name: ORPHAN },
        spec: { agentRef: "nobody", runtimeRef: "reference" },
      });
      expect(put.status).toBe(201);
      const failed = await phase("Failed", ORPHAN, 30);
      expect(failed.status.conditions[0]).toMatchObject({
        type: "Ready",
        status: "False",
        reason: "Invalid",
        message: "Agent default/nobody not found",
      });
      expect(failed.status.containerName).toBeUndefined();
      expect(failed.status.sessionId).toBeUndefined();
      expect(await probe.workloadsNamed("nobody")).toEqual([]);
      // A request to it is refused, not relayed.
      expect((await system.call("POST", `${SESSIONS}/${ORPHAN}/requests`, { input: "hi" })).status).toBe(412);
      expect((await system.call("DELETE", `${SESSIONS}/${ORPHAN}`)).status).toBe(200);
    });

    it("a credential naming a server variable the server does not offer is refused when the Agent is written, naming it, never its value", async () => {
      // A session Agent and a one-shot one alike: 400 naming the field, nothing stored or made.
      // (A variable that stops being offered after the write is refused at provision: proxy/lifecycle/credential-offer.test.ts.)
      for (const [name, runtimeRef] of [
        ["leaky", "reference"],
        ["leaky-run", "oneshot"],
      ] as const) {
        const put = await system.call(
          "PUT",
          `${NS}/agents/${name}`,
          modelAgent(name, model, { runtimeRef, secretEnv: "E2E_UNLISTED_SECRET" }),
        );
        expect(put.status).toBe(400);
        expect(put.body.code).toBe("INVALID_ARGUMENT");
        expect(put.body.details.field_violations).toEqual([
          {
            field: "spec.credentials.0.secretRef.env",
            description: expect.stringMatching(
              /^credential MODEL_API_KEY refers to environment variable E2E_UNLISTED_SECRET, which the server does not offer to sessions/,
            ),
          },
        ]);
        expect(JSON.stringify(put.body)).not.toContain(UNLISTED);
        expect((await system.call("GET", `${NS}/agents/${name}`)).status).toBe(404);
      }
      expect(await probe.workloadsNamed("leaky")).toEqual([]);
      const logs = [...(system.server?.logs ?? []), ...(system.runner?.logs ?? [])].join("");
      expect(logs).not.toContain(UNLISTED);
    });

    // One-shot AgentRuns are placed on Docker runners only (proxy/harness/agent-runs.ts).
    if (options.engine === "docker")
      it("a one-shot AgentRun of a v1alpha1 runtime runs to completion and leaves no container or network", async () => {
        const docker = dockerClient();
        const run = await system.call("POST", `${NS}/agentruns`, {
          apiVersion: API,
          kind: "AgentRun",
          metadata: { name: "once-1" },
          spec: { agentRef: "runner-agent", input: "remember run-7" },
        });
        expect(run.status).toBe(201);
        expect(run.body.status).toMatchObject({
          phase: "Succeeded",
          exitCode: 0,
          output: "OK, I will remember run-7.",
          usage: { input_tokens: 2, output_tokens: 5 },
          resolvedImageDigest: referenceImage().digest,
        });
        const label = JSON.stringify({ label: ["agent-sessions.dev/run=once-1"] });
        expect(await docker.listContainers({ all: true, filters: label })).toEqual([]);
        expect(await docker.listNetworks({ filters: label })).toEqual([]);
        expect(JSON.stringify(run.body)).not.toContain(SECRET);
      });

    it("delete destroys the session's engine objects and its stack", async () => {
      expect(Object.values(await probe.objects(container))).not.toContain(false);
      const deleted = await timed("delete", () => system.call("DELETE", `${SESSIONS}/${CHAT}`));
      expect(deleted.status).toBe(200);
      expect((await system.call("GET", `${SESSIONS}/${CHAT}`)).status).toBe(404);
      expect((await objectsGone(probe, container)).length).toBeGreaterThan(2);
      expect(backendStateText(runnerDataDir())).not.toContain(`"${stackName()}"`);
      expect(
        existsSync(
          join(runnerDataDir(), "pulumi-state", ".pulumi", "stacks", "agent-sessions", `${stackName()}.json`),
        ),
      ).toBe(false);
      expect(existsSync(join(repoRoot, `Pulumi.${stackName()}.yaml`))).toBe(false);
      expect(existsSync(join(runnerDataDir(), "stack-settings", `Pulumi.${stackName()}.yaml`))).toBe(false);
    });
  });
}
