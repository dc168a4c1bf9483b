/**
 * "Ready means serving" and recovery after restarts (issue 21), against a real server with an
 * in-process runner over the real WebSocket: a HarnessSession is Ready only once the runner's
 * probe of the relay path succeeded, a server restart shows no stale Ready, and a session whose
 * workload stopped while its runner or the engine restarted comes back by itself.
 */
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { defaultSettings } from "../config.ts";
import { type CommandHandler, defaultHandler, type FakeRunner } from "../testing/fake-runner.ts";
import { startTestServer, type TestServer } from "../testing/test-server.ts";
import { until } from "../../test/support/until.ts";

// biome-ignore lint/suspicious/noExplicitAny: JSON bodies of many shapes, read by assertions
type Json = any;

const BASE = "/v1/namespaces/default/harnesssessions";
const RESULT = (id: string) => ({
  id,
  outcome: "succeeded",
  output: `echo ${id}`,
  usage: "unavailable",
  started_at: new Date().toISOString(),
  finished_at: new Date().toISOString(),
});

let t: TestServer;
/** Whether the runner's probe (and relay) reach the adapter. */
let reachable: boolean;

function handler(r: () => FakeRunner): CommandHandler {
  return (command) => {
    switch (command.kind) {
      case "provision":
        return {
          ok: true,
          result: { container_name: command.container_name, endpoint: "10.0.0.9:8080" },
        };
      case "probe":
        return reachable
          ? { ok: true, result: { endpoint: "10.0.0.9:8080" } }
          : {
              ok: false,
              error: {
                code: "FAILED_PRECONDITION",
                message: `workspace ${command.container_name} was not provisioned by this runner`,
              },
            };
      case "relay": {
        if (!reachable)
          return {
            ok: false,
            error: { code: "FAILED_PRECONDITION", message: `workspace ${command.container_name} is unknown` },
          };
        const runner = r();
        for (const [data, done, status] of [
          [JSON.stringify(RESULT(command.request.id)), false, 200],
          ["", true, undefined],
        ] as const)
          runner.send({
            version: 1,
            type: "relay_chunk",
            payload: { relay_id: command.relay_id, data, done, ...(status ? { status } : {}) },
          });
        return { ok: true, result: { status: 200 } };
      }
      default:
        return defaultHandler(command);
    }
  };
}

async function connectRunner(sessions: Parameters<TestServer["runner"]>[0] = {}): Promise<FakeRunner> {
  let runner: FakeRunner | undefined;
  runner = await t.runner({ ...sessions, handler: handler(() => runner as FakeRunner) });
  return runner;
}

const call = (method: string, path: string, body?: unknown) => t.call(method, path, body);

const get = async (): Promise<Json> => (await call("GET", `${BASE}/chat`)).body;
const ask = (id: string) => call("POST", `${BASE}/chat/requests`, { input: "hello", id });
const readyReason = (s: Json): string | undefined =>
  s.status.conditions.find((c: { type: string }) => c.type === "Ready")?.reason;

const phase = (want: string, reason?: string) =>
  until(`phase ${want}${reason ? ` (${reason})` : ""}`, async () => {
    const s = await get();
    return s.status.phase === want && (reason === undefined || readyReason(s) === reason) ? s : undefined;
  });

async function readySession(): Promise<Json> {
  const created = await call("PUT", `${BASE}/chat`, {
    apiVersion: "agent-sessions.dev/v1alpha1",
    kind: "HarnessSession",
    metadata: { name: "chat" },
    spec: { agentRef: "alice", runtimeRef: "reference" },
  });
  expect(created.status).toBe(201);
  return phase("Ready");
}

beforeEach(async () => {
  reachable = true;
  // Restarts after 20 ms, 40 ms, …: the tests watch them happen; a CrashLoop after 2 in a row.
  t = await startTestServer({
    restartPolicy: { ...defaultSettings().restartPolicy, backoffMs: 20, maxRestarts: 2 },
  });
});
afterEach(async () => {
  await t.close();
});

describe("a HarnessSession is Ready only while it serves", () => {
  it("is Pending with reason AdapterUnreachable while the runner cannot reach the adapter, refuses requests as not Ready, and is Ready once a probe succeeds", async () => {
    reachable = false;
    const runner = await connectRunner();
    await call("PUT", `${BASE}/chat`, {
      apiVersion: "agent-sessions.dev/v1alpha1",
      kind: "HarnessSession",
      metadata: { name: "chat" },
      spec: { agentRef: "alice", runtimeRef: "reference" },
    });
    const unreachable = await phase("Pending", "AdapterUnreachable");
    expect(unreachable.status.conditions[0]).toMatchObject({ status: "False", reason: "AdapterUnreachable" });
    expect(unreachable.status.conditions[0].message).toMatch(/was not provisioned by this runner.*retrying/);
    const refused = await ask("while-unreachable");
    expect(refused.status).toBe(412);
    expect(refused.body).toMatchObject({
      code: "FAILED_PRECONDITION",
      details: { phase: "Pending", reason: "AdapterUnreachable" },
    });
    expect(runner.commandsOf("relay")).toHaveLength(0); // refused before the relay
    reachable = true;
    await phase("Ready", "SessionReady"); // probed again without a spec write
    const served = await ask("once-reachable");
    expect(served.status).toBe(200);
    expect(served.body).toMatchObject({ id: "once-reachable", outcome: "succeeded" });
  });

  it("takes Ready back when the runner cannot relay a request (AdapterUnreachable), until a probe succeeds", async () => {
    await connectRunner();
    await readySession();
    reachable = false;
    // Admitted while Ready; the runner fails it: the relay's own error, and the session is probed.
    const failed = await ask("breaks");
    expect(failed.status).toBe(412);
    expect(failed.body.details?.phase).toBeUndefined();
    const unreachable = await phase("Pending", "AdapterUnreachable");
    expect(unreachable.status.conditions[0].status).toBe("False");
    expect((await ask("while-unreachable")).body.details).toMatchObject({ phase: "Pending" });
    reachable = true;
    await phase("Ready", "SessionReady");
    expect((await ask("healed")).status).toBe(200);
  });

  it("after a server restart shows no stale Ready: not Ready until its runner reattached and the relay path answered", async () => {
    const runner = await connectRunner();
    const before = await readySession();
    const report = {
      session_id: before.status.sessionId as string,
      container_name: before.status.containerName as string,
      state: "READY" as const,
    };
    runner.kill();
    await t.stop();
    const dataDir = t.dataDir;
    t = await startTestServer({ dataDir }, { agent: false });
    // The first GET of the restarted server: no runner is attached, so no request could be relayed.
    const first = await get();
    expect(first.status.phase).toBe("Pending");
    expect(readyReason(first)).toBe("RunnerDisconnected");
    const refused = await ask("before-reattach");
    expect(refused.status).toBe(412);
    expect(refused.body.details).toMatchObject({ phase: "Pending" });
    // The runner comes back with the session, but the relay path is not up yet.
    reachable = false;
    await connectRunner({ sessions: [report] });
    await phase("Pending", "AdapterUnreachable");
    reachable = true;
    const again = await phase("Ready", "SessionReady");
    expect(again.status.sessionId).toBe(report.session_id);
    expect((await ask("after-reattach")).status).toBe(200);
  });
});

describe("a session whose workload stopped underneath it comes back by itself", () => {
  it("its restarted runner reports it ERRORED WorkspaceNotRunning: re-provisioned, resumed under the same session id, Ready again", async () => {
    const first = await connectRunner();
    const before = await readySession();
    const sessionId = before.status.sessionId as string;
    first.kill();
    const runner = await connectRunner({
      sessions: [
        {
          session_id: sessionId,
          container_name: before.status.containerName,
          state: "ERRORED",
          reason: "WorkspaceNotRunning",
        },
      ],
    });
    const again = await phase("Ready", "SessionReady");
    expect(again.status.sessionId).toBe(sessionId);
    // Probed at least once before Ready (more when a status frame's reconcile probes again).
    expect(runner.commands.map((c) => c.kind).filter((k) => k !== "probe")).toEqual(["provision", "start"]);
    expect(runner.commandsOf("probe").length).toBeGreaterThan(0);
    expect(runner.commandsOf("start")[0]).toMatchObject({ session_id: sessionId, resume: true });
    expect((await ask("after-recovery")).status).toBe(200);
  });

  it("the engine restarted under a live runner (ERRORED EngineRestarted): brought back the same way", async () => {
    const runner = await connectRunner();
    const before = await readySession();
    runner.state(before.status.sessionId, "ERRORED", "EngineRestarted");
    await until("a second provision", async () =>
      runner.commandsOf("provision").length === 2 ? true : undefined,
    );
    const again = await phase("Ready", "SessionReady");
    expect(again.status.sessionId).toBe(before.status.sessionId);
    expect(runner.commandsOf("start").at(-1)).toMatchObject({ resume: true });
  });

  it("one that crashed or was OOM-killed is restarted after its back-off, resuming its agent session (restartCount, lastExit)", async () => {
    const runner = await connectRunner();
    const before = await readySession();
    expect(before.status.restartCount).toBe(0);
    runner.state(before.status.sessionId, "ERRORED", "OOMKilled");
    const restarting = await phase("Pending", "Restarting");
    expect(restarting.status.lastExit).toMatchObject({ reason: "OOMKilled" });
    expect(restarting.status.conditions[0].message).toMatch(/OOMKilled.*restart 1 in \d+ ms/);
    const again = await until("Ready after the restart", async () => {
      const s = await get();
      return s.status.phase === "Ready" && s.status.restartCount === 1 ? s : undefined;
    });
    expect(again.status.sessionId).toBe(before.status.sessionId);
    expect(runner.commandsOf("provision")).toHaveLength(2);
    expect(runner.commandsOf("start").at(-1)).toMatchObject({
      session_id: before.status.sessionId,
      resume: true,
    });
    expect((await ask("after-restart")).status).toBe(200);
  });

  it("one that keeps crashing ends Failed/CrashLoop and stays so until the spec is written again", async () => {
    const runner = await connectRunner();
    const before = await readySession();
    const id = before.status.sessionId as string;
    for (let restart = 1; restart <= 2; restart++) {
      runner.state(id, "ERRORED", "ContainerExited");
      await until(`Ready after restart ${restart}`, async () => {
        const s = await get();
        return s.status.phase === "Ready" && s.status.restartCount === restart ? s : undefined;
      });
    }
    runner.state(id, "ERRORED", "ContainerExited");
    const looping = await phase("Failed", "CrashLoop");
    expect(looping.status).toMatchObject({ restartCount: 2, lastExit: { reason: "ContainerExited" } });
    expect(looping.status.conditions[0].message).toMatch(/again after 2 restarts in a row/);
    await new Promise((r) => setTimeout(r, 300));
    expect(runner.commandsOf("provision")).toHaveLength(3);
    expect((await ask("while-looping")).status).toBe(412);
    await call("PATCH", `${BASE}/chat`, { spec: { desiredState: "running" } });
    const recovered = await phase("Ready", "SessionReady");
    expect(recovered.status.sessionId).toBe(id);
    // The spec write started afresh: the next crash is restarted again, not a CrashLoop.
    runner.state(id, "ERRORED", "ContainerExited");
    await until("Ready after a restart past the spec write", async () => {
      const s = await get();
      return s.status.phase === "Ready" && s.status.restartCount === 3 ? s : undefined;
    });
  });

  it("with AGENT_SESSIONS_RESTART_LIMIT=0 one that crashed stays Failed (AdapterExited) until the spec is written again", async () => {
    await t.close();
    t = await startTestServer({ restartPolicy: { ...defaultSettings().restartPolicy, maxRestarts: 0 } });
    const runner = await connectRunner();
    const before = await readySession();
    runner.state(before.status.sessionId, "ERRORED", "OOMKilled");
    const failed = await phase("Failed", "AdapterExited");
    expect(failed.status.sessionId).toBe(before.status.sessionId);
    await new Promise((r) => setTimeout(r, 300));
    expect(runner.commandsOf("provision")).toHaveLength(1);
    expect((await get()).status).toMatchObject({ phase: "Failed", restartCount: 0 });
  });
});
