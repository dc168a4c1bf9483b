/**
 * The paused tier end to end on Docker (issue 37), real parts only: `serve --no-runner` and a
 * `runner --engine docker` over the real WebSocket, real dockerd and Pulumi stacks, the reference
 * image talking to the loopback model server.
 *
 * A paused session's container is frozen by the engine (`State.Paused`), and answers from memory
 * when woken: its adapter process is the same one (same PID and process start time, read through
 * the engine) and its conversation is kept. A request, an agent message and a files call each wake
 * it; a runner killed while a session is paused and started again keeps it frozen and Paused, and a
 * request still wakes it from memory; `idleTimeout` still stops a paused session; a runner's paused-memory budget evicts the least
 * recently paused session (reason Evicted), never a running one; bad input is a 400 that changes
 * nothing; a paused container is still the declared one (`policy check --expect-no-changes
 * --refresh` finds no drift).
 */
import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { dockerClient } from "../../infra/docker/provider/provider.ts";
import { pendingRecordings } from "../../stacks/recording.ts";
import { modelAgent } from "../fixtures/agent-manifest.ts";
import { type ModelServer, startModelServer } from "../fixtures/model-server.ts";
import { dockerProbe, type EngineProbe } from "../support/engine-probes.ts";
import {
  BRIDGE_IP,
  followEvents,
  type Json,
  type Proc,
  System,
  until,
  writeLogTails,
} from "../support/system.ts";

const API = "agent-sessions.dev/v1alpha1";
const NS = "/v1/namespaces/default";
const SESSIONS = `${NS}/harnesssessions`;
const READY_MS = 240_000;
const TOKEN = `tok-${randomBytes(4).toString("hex")}`;
const RECALL = "what token did I give you?";
const NAME = "frozen";

let system: System;
let model: ModelServer;
let probe: EngineProbe;
let budgetRunner: Proc | undefined;
const docker = dockerClient();
let container = "";
let sessionId = "";
let adapter: AdapterProcess;
/** The memory a paused reference session holds (the PausedMemory event's, from docker stats). */
let pausedMemory = 0;

type AdapterProcess = { pid: number; startedAt: string; procStart: string };

/** The container's main process (the adapter) as the engine sees it, and its start time in the kernel. */
async function adapterProcess(name: string): Promise<AdapterProcess> {
  const info = await docker.getContainer(name).inspect();
  const pid = info.State.Pid;
  // Field 22 of /proc/PID/stat: the process's start time in clock ticks since boot.
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  const procStart = stat.slice(stat.lastIndexOf(")") + 2).split(" ")[19] ?? "";
  return { pid, startedAt: info.State.StartedAt, procStart };
}

const isPaused = async (name: string) => (await docker.getContainer(name).inspect()).State.Paused;

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

const readyOf = (s: Json) => s.status.conditions.find((c: { type: string }) => c.type === "Ready");
const ask = (name: string, body: Record<string, unknown>) =>
  system.call("POST", `${SESSIONS}/${name}/requests`, body);

function manifest(name: string, spec: Record<string, unknown>) {
  return {
    apiVersion: API,
    kind: "HarnessSession",
    metadata: { name },
    spec: { agentRef: "assistant", runtimeRef: "reference", desiredState: "running", ...spec },
  };
}

/** Pause on demand and wait until the engine says the container is frozen. */
async function pausedOnDemand(name: string, workload: string): Promise<Json> {
  const patched = await system.call("PATCH", `${SESSIONS}/${name}`, { spec: { desiredState: "paused" } });
  expect(patched.status).toBe(200);
  const paused = await phase(name, "Paused", 60_000);
  await until(`${workload} frozen`, () => isPaused(workload), 30_000);
  return paused;
}

/** The `event` log frame on a session's stream matching `match`, once it arrived. */
function eventOf(events: { events: Json[] }, event: string, match: (payload: Json) => boolean = () => true) {
  return until(
    `${event} event`,
    () =>
      events.events.find(
        (e) => e.data?.type === "log" && e.data?.payload?.event === event && match(e.data.payload),
      ),
    30_000,
  );
}

beforeAll(async () => {
  probe = dockerProbe();
  model = await startModelServer(BRIDGE_IP, 0);
  process.env.E2E_MODEL_KEY = `sk-e2e-${randomBytes(12).toString("hex")}`;
  system = new System(undefined, { AGENT_SESSIONS_IDLE_CHECK_MS: "500" });
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
  for (const name of [NAME, "old-paused", "new-paused", "busy"])
    await system?.call("DELETE", `${SESSIONS}/${name}`).catch(() => undefined);
  if (budgetRunner) {
    budgetRunner.child.kill("SIGTERM");
    await budgetRunner.exited;
  }
  await system?.stop();
  await model?.close();
  console.log(
    `pause: a paused reference session holds ${pausedMemory} bytes (docker stats); logs in ${system?.dataDir}`,
  );
});

describe("the paused tier (real engine: docker)", () => {
  it("a paused session is frozen by the engine with its memory; nothing about it is recorded as a stop", async () => {
    const created = await system.call("PUT", `${SESSIONS}/${NAME}`, manifest(NAME, { idleTimeout: "30m" }));
    expect(created.status).toBe(201);
    const ready = await phase(NAME, "Ready");
    container = ready.status.containerName;
    sessionId = ready.status.sessionId;
    const told = await ask(NAME, { input: `remember ${TOKEN}`, id: "remember-1" });
    expect(told.status).toBe(200);
    adapter = await adapterProcess(container);

    const events = followEvents(system, `?session_id=${sessionId}`);
    try {
      const paused = await pausedOnDemand(NAME, container);
      expect(readyOf(paused)).toMatchObject({ status: "False", reason: "Paused" });
      expect(paused.status.pausedAt).toBe(readyOf(paused).lastTransitionTime);
      await eventOf(events, "Paused");
      // The memory comes after the pause (an engine stats read the pause does not wait for).
      const memory = await eventOf(events, "PausedMemory");
      expect(memory.data.payload.memory_bytes).toBeGreaterThan(0);
      pausedMemory = memory.data.payload.memory_bytes;
    } finally {
      await events.close();
    }
    expect(await probe.running(container)).toBe(true);
    expect(await adapterProcess(container)).toEqual(adapter);
    // A paused container is still the declared one: once the create's recording settled, a
    // refreshed preview of the stack proposes nothing.
    await until(
      "recordings settled",
      () => pendingRecordings(join(system.dataDir, "runner")).length === 0,
      120_000,
    );
    const stack: string = (await session(NAME)).status.stackName;
    const run = await system.runCli([
      "policy",
      "check",
      "-s",
      stack,
      "--expect-no-changes",
      "--refresh",
      "--data-dir",
      system.dataDir,
    ]);
    expect(run.stdout, `${run.stdout}${run.stderr.slice(-2000)}`).toContain(
      `${stack}: no policy violations, no changes (refreshed)`,
    );
    expect(run.code).toBe(0);
    expect(await isPaused(container)).toBe(true);
  });

  it("a request wakes it and is answered from memory: the same adapter process, the conversation kept", async () => {
    const events = followEvents(system, `?session_id=${sessionId}`);
    try {
      const recalled = await ask(NAME, { input: RECALL, id: "recall-1" });
      expect(recalled.status, JSON.stringify(recalled.body)).toBe(200);
      expect(recalled.body.output).toBe(`The token is ${TOKEN}.`);
      expect(await adapterProcess(container)).toEqual(adapter);
      const woken = await eventOf(events, "Woken");
      expect(woken.data.payload.why).toBe("request recall-1");
      // desiredState is still paused: idle again, it is frozen again.
      await phase(NAME, "Paused", 30_000);
      await until("frozen again", () => isPaused(container), 30_000);
    } finally {
      await events.close();
    }
  });

  it("an agent message wakes it", async () => {
    const events = followEvents(system, `?session_id=${sessionId}`);
    try {
      const sent = await system.rpc("SendAgentMessage", {
        session_id: sessionId,
        message: { type: "message", text: "hello from a message" },
      });
      expect(sent.status, JSON.stringify(sent.body)).toBe(200);
      const woken = await eventOf(events, "Woken", (p) => p.why === "an agent message");
      expect(woken.data.payload.woken_in_ms).toBeGreaterThanOrEqual(0);
      // The agent answered (it was alive to read the line).
      await until("the agent's answer", () => events.events.find((e) => e.data?.type === "message"), 30_000);
      await phase(NAME, "Paused", 30_000);
    } finally {
      await events.close();
    }
    expect(await adapterProcess(container)).toEqual(adapter);
  });

  it("a files call wakes it", async () => {
    const events = followEvents(system, `?session_id=${sessionId}`);
    try {
      await until("frozen", () => isPaused(container), 30_000);
      const listed = await system.call("GET", `${SESSIONS}/${NAME}/workspace/files`);
      expect(listed.status, JSON.stringify(listed.body)).toBe(200);
      await eventOf(events, "Woken", (p) => p.why === "a files call");
      await phase(NAME, "Paused", 30_000);
    } finally {
      await events.close();
    }
    expect(await adapterProcess(container)).toEqual(adapter);
  });

  it("a runner killed (SIGKILL) while the session is paused and started again keeps it frozen and Paused; a request wakes it from memory", async () => {
    await phase(NAME, "Paused", 30_000);
    await until("frozen", () => isPaused(container), 30_000);
    await system.kill("runner", "SIGKILL");
    expect(await isPaused(container)).toBe(true);
    await system.startRunner(["--engine", "docker"]);
    // Reattached: its agent session is READY again under its id (PROTOCOL.md §5).
    await until(
      "agent session READY again",
      async () => {
        const status = await system.rpc("GetAgentStatus", { session_id: sessionId });
        return status.body.sessions?.[0]?.state === "READY" ? true : undefined;
      },
      60_000,
    );
    // The engine still holds it frozen, and the server says so.
    expect(await isPaused(container)).toBe(true);
    const paused = await phase(NAME, "Paused", 30_000);
    expect(readyOf(paused)).toMatchObject({ status: "False", reason: "Paused" });
    expect(await isPaused(container)).toBe(true);
    const events = followEvents(system, `?session_id=${sessionId}`);
    try {
      const recalled = await ask(NAME, { input: RECALL, id: "recall-after-restart" });
      expect(recalled.status, JSON.stringify(recalled.body)).toBe(200);
      expect(recalled.body.output).toBe(`The token is ${TOKEN}.`);
      expect(await adapterProcess(container)).toEqual(adapter);
      const woken = await eventOf(events, "Woken");
      expect(woken.data.payload.why).toBe("request recall-after-restart");
      // desiredState is still paused: idle again, it is frozen again by the restarted runner.
      await phase(NAME, "Paused", 30_000);
      await until("frozen again", () => isPaused(container), 30_000);
    } finally {
      await events.close();
    }
  });

  it("bad input is a 400 that changes nothing", async () => {
    const before = await session(NAME);
    for (const spec of [{ pauseAfter: "45m" }, { pauseAfter: "-1s" }, { pauseAfter: "soon" }]) {
      const patched = await system.call("PATCH", `${SESSIONS}/${NAME}`, { spec });
      expect(patched.status, JSON.stringify(spec)).toBe(400);
      expect(patched.body.code).toBe("INVALID_ARGUMENT");
      expect(patched.body.message).toMatch(/pauseAfter/);
    }
    const after = await session(NAME);
    expect(after.metadata.generation).toBe(before.metadata.generation);
    expect(after.spec).toEqual(before.spec);
    expect(after.status.phase).toBe("Paused");
  });

  it("pauseAfter pauses a running session after that long without activity; idleTimeout still stops it from Paused", async () => {
    const running = await system.call("PATCH", `${SESSIONS}/${NAME}`, {
      spec: { desiredState: "running", pauseAfter: "2s", idleTimeout: "8s" },
    });
    expect(running.status).toBe(200);
    await phase(NAME, "Ready", 30_000);
    expect(await isPaused(container)).toBe(false);
    await phase(NAME, "Paused", 30_000);
    expect(await isPaused(container)).toBe(true);
    const stopped = await phase(NAME, "Stopped", 60_000);
    expect(readyOf(stopped)).toMatchObject({ status: "False", reason: "IdleTimeout" });
    await until("container gone, volume kept", () => probe.stoppedKeepingVolume(container), 60_000);
  });

  it("over a runner's paused-memory budget the least recently paused session is stopped, reason Evicted; a running one is not", async () => {
    expect(pausedMemory).toBeGreaterThan(0);
    // A runner whose budget holds one paused reference session, not two.
    system.extraEnv.AGENT_SESSIONS_RUNNER_PAUSED_MEMORY_MAX_BYTES = String(Math.round(pausedMemory * 1.5));
    budgetRunner = await system.launchRunner("budget", ["--engine", "docker", "--label", "pool=budget"]);
    delete system.extraEnv.AGENT_SESSIONS_RUNNER_PAUSED_MEMORY_MAX_BYTES;
    const pinned = { runnerSelector: { pool: "budget" }, idleTimeout: "30m", autoResume: true };
    for (const name of ["old-paused", "new-paused", "busy"])
      expect((await system.call("PUT", `${SESSIONS}/${name}`, manifest(name, pinned))).status).toBe(201);
    const old = await phase("old-paused", "Ready");
    const fresh = await phase("new-paused", "Ready");
    await phase("busy", "Ready");
    await pausedOnDemand("old-paused", old.status.containerName);
    const events = followEvents(system, `?session_id=${old.status.sessionId}`);
    try {
      await pausedOnDemand("new-paused", fresh.status.containerName);
      const evicted = await phase("old-paused", "Stopped", 120_000);
      expect(readyOf(evicted)).toMatchObject({ status: "False", reason: "Evicted" });
      await eventOf(events, "Evicted");
    } finally {
      await events.close();
    }
    await until(
      "evicted: container gone, volume kept",
      () => probe.stoppedKeepingVolume(old.status.containerName),
      60_000,
    );
    expect((await session("new-paused")).status.phase).toBe("Paused");
    expect((await session("busy")).status.phase).toBe("Ready");
  });
});
