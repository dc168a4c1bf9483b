/**
 * Auto-resume (spec.autoResume) end to end on Docker, real parts only: `serve --no-runner` and a
 * `runner --engine docker` over the real WebSocket, real dockerd and Pulumi stacks, the reference
 * image talking to the loopback model server. A session with a short idleTimeout idles to
 * Stopped (no container, the volume kept); a request to it is then answered (one slower reply),
 * recalls a token told before the stop (from the volume) and leaves the session Ready again.
 * Concurrent requests during one resume are all answered and counted once each; a session
 * without autoResume, or one the user stopped, still answers FAILED_PRECONDITION.
 */
import { randomBytes } from "node:crypto";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { type ModelServer, startModelServer } from "../fixtures/model-server.ts";
import { dockerProbe, type EngineProbe } from "../support/engine-probes.ts";
import { BRIDGE_IP, followEvents, type Json, System, until, writeLogTails } from "../support/system.ts";
import { modelAgent } from "../fixtures/agent-manifest.ts";

const API = "agent-sessions.dev/v1alpha1";
const NS = "/v1/namespaces/default";
const SESSIONS = `${NS}/harnesssessions`;
/** Auto-resumes. */
const AUTO = "auto-chat";
/** Does not: a stopped one refuses requests as before. */
const PLAIN = "plain-chat";
const READY_MS = 240_000;
const TOKEN = `tok-${randomBytes(4).toString("hex")}`;
const RECALL = "what token did I give you?";

let system: System;
let model: ModelServer;
let probe: EngineProbe;
let container = "";
let sessionId = "";
const timings: Record<string, number> = {};

async function session(name: string): Promise<Json> {
  const got = await system.call("GET", `${SESSIONS}/${name}`);
  if (got.status !== 200) throw new Error(`GET ${name}: ${got.status} ${JSON.stringify(got.body)}`);
  return got.body;
}

async function phase(name: string, want: string, timeoutMs = READY_MS): Promise<Json> {
  return until(
    `${name} ${want}`,
    async () => {
      const s = await session(name);
      return s.status.phase === want ? s : undefined;
    },
    timeoutMs,
  );
}

const ask = (name: string, body: Record<string, unknown>) =>
  system.call("POST", `${SESSIONS}/${name}/requests`, body);

/** Idle to Stopped for IdleTimeout, and the container gone with the volume kept. */
async function idledAway(name: string, workload: string): Promise<Json> {
  const stopped = await phase(name, "Stopped", 120_000);
  expect(stopped.status.conditions).toContainEqual(
    expect.objectContaining({ type: "Ready", status: "False", reason: "IdleTimeout" }),
  );
  await until("container gone, volume kept", () => probe.stoppedKeepingVolume(workload), 60_000);
  return stopped;
}

function manifest(name: string, spec: Record<string, unknown>) {
  return {
    apiVersion: API,
    kind: "HarnessSession",
    metadata: { name },
    spec: { agentRef: "assistant", runtimeRef: "reference", desiredState: "running", ...spec },
  };
}

beforeAll(async () => {
  probe = dockerProbe();
  model = await startModelServer(BRIDGE_IP, 0);
  process.env.E2E_MODEL_KEY = `sk-e2e-${randomBytes(12).toString("hex")}`;
  // A resume on a loaded 2-core machine can take a while: the requests may wait this long.
  system = new System(undefined, { AGENT_SESSIONS_AUTO_RESUME_TIMEOUT_MS: "240000" });
  await system.startServer();
  await system.startRunner(["--engine", "docker"]);
  const agent = await system.call("PUT", `${NS}/agents/assistant`, modelAgent("assistant", model));
  expect(agent.status).toBe(201);
});

afterEach((context) => {
  if (context.task.result?.state !== "fail") return;
  writeLogTails(system);
});

afterAll(async () => {
  for (const name of [AUTO, PLAIN])
    await system?.call("DELETE", `${SESSIONS}/${name}`).catch(() => undefined);
  const logs = { server: system?.server?.logs ?? [], runner: system?.runner?.logs ?? [] };
  await system?.stop();
  await model?.close();
  // The whole logs, for reading a failure past the tails afterEach shows.
  for (const [which, lines] of Object.entries(logs))
    if (lines.length) writeFileSync(join(system.dataDir, `${which}.log`), lines.join(""));
  console.log(`auto-resume: timings (ms) ${JSON.stringify(timings)}; logs in ${system?.dataDir}`);
});

describe("auto-resume of an idle HarnessSession (real engine: docker)", () => {
  it("a session with autoResume remembers a token, then idles to Stopped: no container, the volume kept", async () => {
    const created = await system.call(
      "PUT",
      `${SESSIONS}/${AUTO}`,
      manifest(AUTO, { idleTimeout: "10m", autoResume: true }),
    );
    expect(created.status).toBe(201);
    expect(created.body.spec.autoResume).toBe(true);
    const ready = await phase(AUTO, "Ready");
    container = ready.status.containerName;
    sessionId = ready.status.sessionId;
    const told = await ask(AUTO, { input: `remember ${TOKEN}`, id: "remember-1" });
    expect(told.status).toBe(200);
    expect(told.body.output).toBe(`OK, I will remember ${TOKEN}.`);

    expect((await system.call("PATCH", `${SESSIONS}/${AUTO}`, { spec: { idleTimeout: "5s" } })).status).toBe(
      200,
    );
    const stopped = await idledAway(AUTO, container);
    expect(stopped.status.conditions).toContainEqual(
      expect.objectContaining({ type: "Ready", message: expect.stringMatching(/next request resumes it/) }),
    );
  });

  it("a request to it resumes it and is answered: the token is recalled and the session is Ready again", async () => {
    const before = await session(AUTO);
    const events = followEvents(system, `?session_id=${sessionId}`);
    try {
      const sentAt = new Date().toISOString();
      const started = Date.now();
      const recalled = await ask(AUTO, { input: RECALL, id: "recall-auto-1" });
      timings["stopped→answered (auto-resume)"] = Date.now() - started;
      expect(recalled.status).toBe(200);
      expect(recalled.body).toMatchObject({ id: "recall-auto-1", outcome: "succeeded" });
      expect(recalled.body.output).toBe(`The token is ${TOKEN}.`);

      const after = await session(AUTO);
      expect(after.status).toMatchObject({
        phase: "Ready",
        sessionId,
        containerName: container,
        requestCount: before.status.requestCount + 1,
        activeRequests: 0,
        lastRequestId: "recall-auto-1",
        lastRequestOutcome: "succeeded",
      });
      expect(after.status.lastActivityTime >= sentAt).toBe(true);
      expect(after.status.conditions).toContainEqual(
        expect.objectContaining({ type: "Ready", status: "True", reason: "SessionReady" }),
      );
      expect(after.status.conditions).toContainEqual(
        expect.objectContaining({
          type: "AutoResumed",
          status: "True",
          reason: "RequestArrived",
          message: expect.stringContaining("recall-auto-1"),
        }),
      );
      expect(await probe.running(container)).toBe(true);
      // The event stream says so too: an AutoResumed log frame on the agent session's stream.
      const resumedEvent = await until(
        "AutoResumed event",
        () => events.events.find((e) => e.data?.type === "log" && e.data?.payload?.event === "AutoResumed"),
        10_000,
      );
      expect(resumedEvent.data.payload).toMatchObject({
        request_id: "recall-auto-1",
        harness_session: { namespace: "default", name: AUTO },
      });
      timings["auto-resume→Ready (server)"] = resumedEvent.data.payload.resumed_in_ms;
    } finally {
      await events.close();
    }
  });

  it("concurrent requests during one resume are all answered and counted once each", async () => {
    await idledAway(AUTO, container);
    const before = await session(AUTO);
    const events = followEvents(system, `?session_id=${sessionId}`);
    try {
      const ids = ["burst-1", "burst-2", "burst-3", "burst-4"];
      const sentAt = new Date().toISOString();
      const started = Date.now();
      const replies = await Promise.all(ids.map((id) => ask(AUTO, { input: RECALL, id })));
      timings["stopped→4 concurrent answered"] = Date.now() - started;
      for (const [i, reply] of replies.entries()) {
        expect(reply.status, JSON.stringify(reply.body)).toBe(200);
        expect(reply.body).toMatchObject({ id: ids[i], outcome: "succeeded" });
        expect(reply.body.output).toBe(`The token is ${TOKEN}.`);
      }
      const after = await session(AUTO);
      expect(after.status).toMatchObject({
        phase: "Ready",
        requestCount: before.status.requestCount + ids.length,
        activeRequests: 0,
        errorCount: before.status.errorCount,
      });
      expect(after.status.lastActivityTime >= sentAt).toBe(true);
      // Each request reached the adapter exactly once.
      const results = (await probe.readFile(container, "/workspace/results.ndjson"))
        .split("\n")
        .filter((l) => l.trim().startsWith("{"))
        .map((l) => JSON.parse(l) as { id: string });
      for (const id of ids) expect(results.filter((r) => r.id === id)).toHaveLength(1);
      // One resume for all of them: one AutoResumed event, naming one of the requests.
      await new Promise((r) => setTimeout(r, 1_000));
      const resumed = events.events.filter(
        (e) => e.data?.type === "log" && e.data?.payload?.event === "AutoResumed",
      );
      expect(resumed).toHaveLength(1);
      expect(ids).toContain(resumed[0]?.data.payload.request_id);
      timings["auto-resume→Ready, 4 waiting (server)"] = resumed[0]?.data.payload.resumed_in_ms;
    } finally {
      await events.close();
    }
  });

  it("a session the user stopped (desiredState: stopped) is not resumed by a request", async () => {
    const patched = await system.call("PATCH", `${SESSIONS}/${AUTO}`, { spec: { desiredState: "stopped" } });
    expect(patched.status).toBe(200);
    const stopped = await phase(AUTO, "Stopped", 120_000);
    expect(stopped.status.conditions).toContainEqual(
      expect.objectContaining({ type: "Ready", status: "False", reason: "Stopped" }),
    );
    await until("container gone, volume kept", () => probe.stoppedKeepingVolume(container), 60_000);
    const refused = await ask(AUTO, { input: RECALL });
    expect(refused.status).toBe(412);
    expect(refused.body).toMatchObject({
      code: "FAILED_PRECONDITION",
      details: { phase: "Stopped", reason: "Stopped" },
    });
    expect(refused.body.message).toMatch(/autoResume does not override desiredState: stopped/);
    await new Promise((r) => setTimeout(r, 1_000));
    expect((await session(AUTO)).status.phase).toBe("Stopped");
    expect(await probe.stoppedKeepingVolume(container)).toBe(true);
  });

  it("a session without autoResume still answers FAILED_PRECONDITION once idle, and stays stopped", async () => {
    const created = await system.call("PUT", `${SESSIONS}/${PLAIN}`, manifest(PLAIN, { idleTimeout: "5s" }));
    expect(created.status).toBe(201);
    expect(created.body.spec.autoResume).toBe(false);
    const ready = await phase(PLAIN, "Ready");
    const plainContainer = ready.status.containerName;
    await idledAway(PLAIN, plainContainer);
    const refused = await ask(PLAIN, { input: RECALL });
    expect(refused.status).toBe(412);
    expect(refused.body).toMatchObject({
      code: "FAILED_PRECONDITION",
      details: { phase: "Stopped", reason: "IdleTimeout" },
    });
    await new Promise((r) => setTimeout(r, 1_000));
    const after = await session(PLAIN);
    expect(after.status).toMatchObject({ phase: "Stopped", requestCount: 0 });
    expect(after.status.conditions.some((c: Json) => c.type === "AutoResumed")).toBe(false);
    expect(await probe.stoppedKeepingVolume(plainContainer)).toBe(true);
  });
});
