/**
 * Issue 34 item 11b: a standalone runner holding a session is killed and stays away past the
 * reattach window (its session goes ERRORED), a runner of the same name comes back on the same
 * data dir, then StopAgentSession and RemoveAgentWorkspace: "removed" means removed. A real
 * server, the real Runner over the real WebSocket, the in-memory engine (runner/engine/fake-driver.ts)
 * whose running workloads outlive the runner process.
 */
import { afterEach, beforeEach, expect, it } from "vitest";
import { RUNNER_TOKEN, startTestServer, type TestServer } from "../../proxy/testing/test-server.ts";
import { parseRunnerConfig } from "../../runner/config.ts";
import { FakeDriver, type FakeMachine, fakeMachine } from "../../runner/engine/fake-driver.ts";
import { Runner } from "../../runner/runner.ts";
import { SESSION_FILE_NAME, SessionFile } from "../../runner/sessions/session-file.ts";

const REATTACH_WINDOW_MS = 300;

let t: TestServer;
let machine: FakeMachine;
const runners: Runner[] = [];

async function startRunner(): Promise<{ runner: Runner; driver: FakeDriver }> {
  const config = parseRunnerConfig({
    AGENT_SESSIONS_SERVER_URL: t.server.url,
    AGENT_SESSIONS_RUNNER_TOKEN: RUNNER_TOKEN,
    AGENT_SESSIONS_RUNNER_DATA_DIR: `${t.dataDir}/runner`,
    // The model gateway on loopback: the test Agent has a model.
    AGENT_SESSIONS_GATEWAY_ADDRESS: "127.0.0.1:0",
    AGENT_SESSIONS_RUNNER_NAME: "standalone",
    AGENT_SESSIONS_ENGINE: "docker",
  });
  const driver = new FakeDriver({ machine });
  const runner = new Runner(config, driver, () => {});
  runners.push(runner);
  await runner.start();
  return { runner, driver };
}

async function until<T>(what: string, read: () => Promise<T>, ok: (value: T) => boolean): Promise<T> {
  const end = Date.now() + 10_000;
  for (;;) {
    const value = await read();
    if (ok(value)) return value;
    if (Date.now() > end) throw new Error(`${what}: ${JSON.stringify(value)}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

const status = async (sessionId: string) =>
  ((await t.rpc("GetAgentStatus", { session_id: sessionId })).body.sessions as { state: string }[])[0]?.state;

beforeEach(async () => {
  machine = fakeMachine();
  t = await startTestServer({ reattachWindowMs: REATTACH_WINDOW_MS });
});

afterEach(async () => {
  for (const r of runners.splice(0)) r.stop();
  await t.close();
});

it("a runner back after its reattach window expired: Stop and Remove leave nothing running (issue 34 item 11b)", async () => {
  await startRunner();
  await until(
    "runner attached",
    () => t.call("GET", "/v1/runners", undefined),
    (r) => JSON.stringify(r.body).includes("standalone"),
  );
  const provisioned = await t.rpc("ProvisionAgentWorkspace", { agent_ref: "alice" });
  expect(provisioned.status, JSON.stringify(provisioned.body)).toBe(200);
  const containerName = provisioned.body.container_name as string;
  const started = await t.rpc("StartAgentSession", { container_name: containerName });
  expect(started.status, JSON.stringify(started.body)).toBe(200);
  const sessionId = started.body.session_id as string;
  await until(
    "READY",
    () => status(sessionId),
    (s) => s === "READY",
  );

  // kill -9: the process goes, the workload stays; past the window the session is ERRORED.
  for (const r of runners.splice(0)) r.stop();
  await until(
    "ERRORED",
    () => status(sessionId),
    (s) => s === "ERRORED",
  );

  const { driver } = await startRunner();
  await until(
    "runner back",
    () => t.call("GET", "/v1/runners", undefined),
    (r) => JSON.stringify(r.body).includes('"connected":true'),
  );

  const stopped = await t.rpc("StopAgentSession", { session_id: sessionId });
  expect(stopped.body.state).toBe("STOPPED");
  const removed = await t.rpc("RemoveAgentWorkspace", { container_name: containerName });
  expect(removed.body).toMatchObject({ removed: true });
  // What a user checks 20 s later (docker ps): here, 1 s of what the server and runner do next.
  await new Promise((r) => setTimeout(r, 1_000));
  expect([...machine.running]).toEqual([]);
  expect(driver.agents.size).toBe(0);
});

it("a runner that starts with a saved session of a workspace the server no longer holds: the server has it removed, nothing left running (issue 34 item 11c)", async () => {
  // What the previous process left: its saved set and the workload still running on the engine.
  const orphan = "ws-default-left-behind";
  machine.running.add(orphan);
  machine.stackTokens.set(orphan, "token");
  new SessionFile(`${t.dataDir}/runner/${SESSION_FILE_NAME}`).save([
    { session_id: "s-left", container_name: orphan, state: "READY" },
  ]);
  const { driver } = await startRunner();
  await until(
    "the workload removed",
    async () => [...machine.running],
    (running) => running.length === 0,
  );
  expect(driver.removed).toEqual([orphan]);
  expect(driver.agents.size).toBe(0);
});
