import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import type { ResultRecord } from "../../contracts/adapter.ts";
import { RUNNER_PROTOCOL_VERSION, type RunnerCommand } from "../../contracts/runner-protocol.ts";
import { autoResumePlan } from "./auto-resume-plan.ts";
import { defaultSettings, parseConfig, type ServerConfig } from "../config.ts";
import { HarnessController } from "./harness-controller.ts";
import { withReady } from "./harness-status.ts";
import type { FakeRunner, Reply } from "../testing/fake-runner.ts";
import type { HarnessStore } from "../store/harness-store.ts";
import { defaultHandler, provisioned } from "../testing/fake-runner.ts";
import { ADMIN_TOKEN, startTestServer, TEST_IMAGE, type TestServer } from "../testing/test-server.ts";
import { until } from "../../test/support/until.ts";

// biome-ignore lint/suspicious/noExplicitAny: JSON bodies of many shapes, read by assertions
type Json = any;

const DIGEST = TEST_IMAGE.split("@")[1] ?? "";
const BASE = "/v1/namespaces/default/harnesssessions";
const API = "agent-sessions.dev/v1alpha1";

type RelayCommand = Extract<RunnerCommand, { kind: "relay" }>;

let t: TestServer | undefined;
let runner: FakeRunner;
/** Delays of the fake runner's commands, by kind (a slow resume, a slow scale-down). */
let delays: Partial<Record<RunnerCommand["kind"], number>> = {};

function result(id: string): ResultRecord {
  return {
    id,
    outcome: "succeeded",
    output: `echo ${id}`,
    usage: { input_tokens: 3, output_tokens: 2 },
    started_at: new Date().toISOString(),
    finished_at: new Date().toISOString(),
  };
}

function answer(command: RelayCommand, r: FakeRunner): Reply {
  const send = (data: string, done: boolean, status?: number) =>
    r.send({
      version: RUNNER_PROTOCOL_VERSION,
      type: "relay_chunk",
      payload: { relay_id: command.relay_id, data, done, ...(status !== undefined ? { status } : {}) },
    });
  send(JSON.stringify(result(command.request.id)), false, 200);
  send("", true);
  return { ok: true, result: { status: 200 } };
}

async function start(overrides: Partial<ServerConfig> = {}): Promise<TestServer> {
  delays = {};
  const server = await startTestServer({ requestTimeoutMs: 2_000, idleCheckMs: 100, ...overrides });
  t = server;
  runner = await server.runner({
    handler: async (command) => {
      const delay = delays[command.kind];
      if (delay) await new Promise((r) => setTimeout(r, delay));
      switch (command.kind) {
        case "provision":
          return provisioned(command, DIGEST);
        case "relay":
          return answer(command, runner);
        default:
          return defaultHandler(command);
      }
    },
  });
  return server;
}

afterEach(async () => {
  await t?.close();
  t = undefined;
});

async function call(method: string, path: string, body?: unknown, init: RequestInit = {}) {
  if (!t) throw new Error("no server");
  const response = await fetch(`${t.server.url}${path}`, {
    method,
    headers: { authorization: `Bearer ${ADMIN_TOKEN}`, "content-type": "application/json" },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
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

const ask = (id: string, init: RequestInit = {}) =>
  call("POST", `${BASE}/chat/requests`, { input: "hello", id }, init);

const chat = async (): Promise<Json> => (await call("GET", `${BASE}/chat`)).body;
const inPhase = (phase: string, reason?: string) =>
  until(`${phase}${reason ? ` (${reason})` : ""}`, async () => {
    const s = await chat();
    const ready = s.status.conditions.find((c: Json) => c.type === "Ready");
    return s.status.phase === phase && (reason === undefined || ready?.reason === reason) ? s : undefined;
  });

async function createChat(spec: Record<string, unknown>): Promise<Json> {
  const created = await call("PUT", `${BASE}/chat`, {
    apiVersion: API,
    kind: "HarnessSession",
    metadata: { name: "chat" },
    spec: { agentRef: "alice", runtimeRef: "reference", ...spec },
  });
  expect(created.status).toBe(201);
  return created.body;
}

/** A session with autoResume (unless told otherwise) that went idle: Stopped, reason IdleTimeout. */
async function idleChat(spec: Record<string, unknown> = {}): Promise<Json> {
  await createChat({ idleTimeout: "1s", autoResume: true, ...spec });
  await inPhase("Ready");
  return inPhase("Stopped", "IdleTimeout");
}

const autoResumedEvents = (frames: Json[]) =>
  frames.filter((f) => f.type === "log" && f.payload?.event === "AutoResumed");

describe("auto-resume (spec.autoResume)", () => {
  it("defaults to false and is validated as a boolean", async () => {
    await start();
    const created = await createChat({});
    expect(created.spec.autoResume).toBe(false);
    const bad = await call("PATCH", `${BASE}/chat`, { spec: { autoResume: "yes" } });
    expect(bad.status).toBe(400);
    expect(bad.body.code).toBe("INVALID_ARGUMENT");
    expect((await chat()).metadata.generation).toBe(1);
  });

  it("a request to a session stopped for IdleTimeout resumes it and is served; AutoResumed is visible", async () => {
    const server = await start();
    const stopped = await idleChat();
    expect(stopped.status.conditions.find((c: Json) => c.type === "Ready").message).toMatch(
      /next request resumes it/,
    );
    const events = await server.events(`?session_id=${stopped.status.sessionId}`);
    const sentAt = new Date().toISOString();
    const reply = await ask("wake-1");
    expect(reply.status).toBe(200);
    expect(reply.body).toMatchObject({ id: "wake-1", outcome: "succeeded" });
    const after = await chat();
    expect(after.status).toMatchObject({
      phase: "Ready",
      sessionId: stopped.status.sessionId,
      requestCount: 1,
      activeRequests: 0,
      lastRequestId: "wake-1",
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
        message: expect.stringContaining("wake-1"),
      }),
    );
    expect(runner.commandsOf("provision")).toHaveLength(2);
    expect(runner.commandsOf("start").map((c) => c.resume)).toEqual([false, true]);
    expect(runner.commandsOf("relay")).toHaveLength(1);
    await events.until(() => autoResumedEvents(events.frames()).length > 0);
    expect(autoResumedEvents(events.frames())[0]).toMatchObject({
      session_id: stopped.status.sessionId,
      payload: { request_id: "wake-1", harness_session: { namespace: "default", name: "chat" } },
    });
  });

  it("concurrent requests during one resume share it: all served, each counted once", async () => {
    const server = await start();
    const stopped = await idleChat();
    const events = await server.events(`?session_id=${stopped.status.sessionId}`);
    delays.provision = 400; // the resume takes a while: every request arrives during it
    const ids = ["a", "b", "c", "d", "e", "f"];
    const replies = await Promise.all(ids.map((id) => ask(id)));
    for (const [i, reply] of replies.entries()) {
      expect(reply.status, JSON.stringify(reply.body)).toBe(200);
      expect(reply.body.id).toBe(ids[i]);
    }
    expect(runner.commandsOf("provision")).toHaveLength(2);
    expect(runner.commandsOf("start")).toHaveLength(2);
    expect(
      runner
        .commandsOf("relay")
        .map((c) => c.request.id)
        .sort(),
    ).toEqual(ids);
    expect((await chat()).status).toMatchObject({ phase: "Ready", requestCount: 6, activeRequests: 0 });
    await events.until(() => autoResumedEvents(events.frames()).length > 0);
    await new Promise((r) => setTimeout(r, 200));
    expect(autoResumedEvents(events.frames())).toHaveLength(1);
  });

  it("without autoResume a session stopped for IdleTimeout still answers FAILED_PRECONDITION", async () => {
    await start();
    await idleChat({ autoResume: false });
    const refused = await ask("no-wake");
    expect(refused.status).toBe(412);
    expect(refused.body).toMatchObject({
      code: "FAILED_PRECONDITION",
      details: { phase: "Stopped", reason: "IdleTimeout" },
    });
    await new Promise((r) => setTimeout(r, 300));
    expect((await chat()).status).toMatchObject({ phase: "Stopped", requestCount: 0 });
    expect(runner.commandsOf("provision")).toHaveLength(1);
  });

  it("a session the user stopped is not resumed by a request: the user's word wins", async () => {
    await start();
    await createChat({ autoResume: true });
    await inPhase("Ready");
    await call("PATCH", `${BASE}/chat`, { spec: { desiredState: "stopped" } });
    await inPhase("Stopped", "Stopped");
    const refused = await ask("no-wake");
    expect(refused.status).toBe(412);
    expect(refused.body).toMatchObject({
      code: "FAILED_PRECONDITION",
      details: { phase: "Stopped", reason: "Stopped" },
    });
    expect(refused.body.message).toMatch(/autoResume does not override desiredState: stopped/);
    expect(runner.commandsOf("provision")).toHaveLength(1);
    expect((await chat()).status.requestCount).toBe(0);
  });

  it("a Failed session is not resumed by a request (it needs a spec write)", async () => {
    // Failed for good at the first exit: no restarts (AGENT_SESSIONS_RESTART_LIMIT=0).
    await start({ restartPolicy: { ...defaultSettings().restartPolicy, maxRestarts: 0 } });
    const created = await createChat({ autoResume: true });
    expect(created.spec.autoResume).toBe(true);
    const ready = await inPhase("Ready");
    runner.state(ready.status.sessionId, "ERRORED", "ContainerExited");
    await inPhase("Failed", "AdapterExited");
    const refused = await ask("no-wake");
    expect(refused.status).toBe(412);
    expect(refused.body).toMatchObject({ code: "FAILED_PRECONDITION", details: { phase: "Failed" } });
    expect(runner.commandsOf("provision")).toHaveLength(1);
  });

  it("a request during the idle stop's drain waits for it to finish, then resumes and is served", async () => {
    await start();
    await createChat({ idleTimeout: "1s", autoResume: true });
    await inPhase("Ready");
    delays.scale_down = 800;
    await inPhase("Draining", "IdleTimeout");
    const reply = await ask("during-drain");
    expect(reply.status, JSON.stringify(reply.body)).toBe(200);
    const kinds = runner.commands.map((c) => c.kind).filter((k) => k !== "relay");
    expect(kinds.indexOf("scale_down")).toBeGreaterThan(-1);
    expect(kinds.lastIndexOf("provision")).toBeGreaterThan(kinds.indexOf("scale_down"));
    expect((await chat()).status).toMatchObject({ phase: "Ready", requestCount: 1 });
  });

  it("a request while the session is coming up (Pending) waits for Ready and is served", async () => {
    await start();
    await idleChat();
    delays.provision = 600;
    await call("PATCH", `${BASE}/chat`, { spec: { idleTimeout: "1h" } }); // a spec write resumes it
    await inPhase("Pending");
    const reply = await ask("joined");
    expect(reply.status, JSON.stringify(reply.body)).toBe(200);
    expect(runner.commandsOf("provision")).toHaveLength(2);
    expect((await chat()).status).toMatchObject({ phase: "Ready", requestCount: 1 });
    expect((await chat()).status.conditions.some((c: Json) => c.type === "AutoResumed")).toBe(false);
  });

  it("a resume slower than the auto-resume timeout is 504 DEADLINE_EXCEEDED; nothing is counted, the resume goes on", async () => {
    await start({ autoResumeTimeoutMs: 300 });
    await idleChat();
    delays.provision = 1_500;
    const late = await ask("too-slow");
    expect(late.status).toBe(504);
    expect(late.body).toMatchObject({
      code: "DEADLINE_EXCEEDED",
      details: { phase: "Pending", timeout_ms: 300 },
    });
    expect(late.body.message).toMatch(/did not become Ready within 300 ms/);
    const ready = await inPhase("Ready");
    expect(ready.status).toMatchObject({ requestCount: 0, activeRequests: 0 });
    expect(runner.commandsOf("relay")).toHaveLength(0);
  });

  it("a client that leaves while the session resumes is not admitted: nothing relayed or counted", async () => {
    await start();
    await idleChat();
    delays.provision = 600;
    const abort = new AbortController();
    const leaving = ask("gone", { signal: abort.signal }).catch((error: unknown) => error);
    await inPhase("Pending");
    abort.abort();
    await leaving;
    await inPhase("Ready");
    await new Promise((r) => setTimeout(r, 300));
    expect(runner.commandsOf("relay")).toHaveLength(0);
    expect((await chat()).status.requestCount).toBe(0);
  });

  it("bad input is refused before anything is resumed", async () => {
    await start();
    await idleChat();
    const bad = await call("POST", `${BASE}/chat/requests`, { input: "" });
    expect(bad.status).toBe(400);
    await new Promise((r) => setTimeout(r, 300));
    expect((await chat()).status.phase).toBe("Stopped");
    expect(runner.commandsOf("provision")).toHaveLength(1);
  });
});

describe("autoResumePlan", () => {
  const now = "2026-01-01T00:00:00.000Z";
  const record = (over: {
    phase: "Pending" | "Ready" | "Draining" | "Failed" | "Stopped" | "Paused";
    reason: Parameters<typeof withReady>[1]["reason"];
    autoResume?: boolean;
    desiredState?: "running" | "paused" | "stopped";
    deleting?: boolean;
  }) => ({
    spec: {
      agentRef: "a",
      runtimeRef: "r",
      idleTimeout: "1m",
      desiredState: over.desiredState ?? "running",
      autoResume: over.autoResume ?? true,
    },
    phase: over.phase,
    conditions: withReady([], { status: "False", reason: over.reason, message: "" }, now),
    deletion_requested_at: over.deleting ? now : undefined,
  });

  it.each([
    ["Stopped", "IdleTimeout", {}, "resume"],
    ["Draining", "IdleTimeout", {}, "resume"],
    ["Pending", "Resuming", {}, "join"],
    ["Pending", "Provisioning", {}, "join"],
    ["Ready", "SessionReady", {}, "ready"],
    ["Stopped", "Stopped", {}, "refuse"],
    ["Draining", "Stopped", {}, "refuse"],
    ["Draining", "Deleting", {}, "refuse"],
    ["Failed", "AdapterExited", {}, "refuse"],
    ["Stopped", "IdleTimeout", { autoResume: false }, "refuse"],
    ["Stopped", "IdleTimeout", { desiredState: "stopped" }, "refuse"],
    ["Stopped", "IdleTimeout", { deleting: true }, "refuse"],
    // The paused tier: a Paused session is woken with or without autoResume; Evicted resumes like IdleTimeout.
    ["Paused", "Paused", {}, "wake"],
    ["Paused", "Paused", { autoResume: false }, "wake"],
    ["Paused", "Paused", { desiredState: "paused" }, "wake"],
    ["Paused", "Paused", { deleting: true }, "refuse"],
    ["Ready", "SessionReady", { autoResume: false }, "ready"],
    ["Stopped", "Evicted", {}, "resume"],
    ["Stopped", "Evicted", { autoResume: false }, "refuse"],
  ] as const)("%s with reason %s (%o) → %s", (phase, reason, over, want) => {
    expect(autoResumePlan(record({ phase, reason, ...over }))).toBe(want);
  });
});

describe("HarnessController.holdAwake", () => {
  it("keeps the idle controller from stopping a session while requests wait for it", async () => {
    const reads: string[] = [];
    const harness = {
      getHarnessSession: async (namespace: string, name: string) => {
        reads.push(`${namespace}/${name}`);
        return undefined;
      },
    } as unknown as HarnessStore;
    const unused = {} as never;
    const controller = new HarnessController({
      harness,
      store: unused,
      workspaces: unused,
      digests: unused,
      sessions: unused,
      runners: unused,
      log: () => {},
      restartPolicy: defaultSettings().restartPolicy,
    });
    const releaseA = controller.holdAwake("default", "chat");
    const releaseB = controller.holdAwake("default", "chat");
    expect(await controller.idleStop("default", "chat", new Date().toISOString())).toBe(false);
    releaseA();
    releaseA(); // twice is once
    expect(await controller.idleStop("default", "chat", new Date().toISOString())).toBe(false);
    expect(reads).toEqual([]); // held: not even looked at
    releaseB();
    expect(await controller.idleStop("default", "chat", new Date().toISOString())).toBe(false);
    expect(reads).toEqual(["default/chat"]); // released: the idle stop goes ahead (here: no such session)
  });
});

describe("AGENT_SESSIONS_AUTO_RESUME_TIMEOUT_MS", () => {
  it("defaults to 120000, takes a positive number of milliseconds and refuses others, naming it", () => {
    const dir = mkdtempSync(join(tmpdir(), "agent-sessions-config-"));
    try {
      expect(parseConfig({ AGENT_SESSIONS_DATA_DIR: dir }).autoResumeTimeoutMs).toBe(120_000);
      expect(
        parseConfig({ AGENT_SESSIONS_DATA_DIR: dir, AGENT_SESSIONS_AUTO_RESUME_TIMEOUT_MS: "5000" })
          .autoResumeTimeoutMs,
      ).toBe(5_000);
      for (const bad of ["0", "-1", "soon"])
        expect(() =>
          parseConfig({ AGENT_SESSIONS_DATA_DIR: dir, AGENT_SESSIONS_AUTO_RESUME_TIMEOUT_MS: bad }),
        ).toThrow(/AGENT_SESSIONS_AUTO_RESUME_TIMEOUT_MS/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
