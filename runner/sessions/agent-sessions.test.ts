import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { FORGED_STATUS_REASON } from "../../contracts/compass.ts";
import { AgentSessions } from "./agent-sessions.ts";
import { FakeDriver } from "../engine/fake-driver.ts";
import { SessionFile } from "./session-file.ts";

/**
 * The engine in memory (runner/engine/fake-driver.ts), its workloads c1…c5 running but the `gone`
 * ones; agents say one frame at start and end when stopped; the `broken` ones' exec fails.
 */
function fakeDriver(gone = new Set<string>(), broken = new Set<string>()): FakeDriver {
  const driver = new FakeDriver();
  for (const c of ["c1", "c2", "c3", "c4", "c5"]) if (!gone.has(c)) driver.machine.running.add(c);
  for (const c of broken) driver.failingExec.add(c);
  return driver;
}

function recorder() {
  const states: string[] = [];
  return { states, events: { frame: () => {}, state: (id: string, s: string) => states.push(`${id}:${s}`) } };
}

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});
function tempFile(): SessionFile {
  const dir = mkdtempSync(join(tmpdir(), "runner-sessions-"));
  dirs.push(dir);
  return new SessionFile(join(dir, "agent-sessions.json"));
}

describe("the runner's session set", () => {
  it("is saved on every change and read back after a restart", () => {
    const file = tempFile();
    expect(file.load()).toEqual([]);
    file.save([{ session_id: "s1", container_name: "c1", state: "READY" }]);
    expect(file.load()).toEqual([{ session_id: "s1", container_name: "c1", state: "READY" }]);
  });

  it("refuses a file that is not a session file rather than reading it as empty", () => {
    const file = tempFile();
    writeFileSync(file.path, '{"sessions": "nope"}');
    expect(() => file.load()).toThrow(/not a runner session file/);
  });

  it("restores after a restart: agents started again where the workload runs, ERRORED kept with its reason, STOPPING dropped, a stopped workload's session ERRORED WorkspaceNotRunning, a failed exec left out", async () => {
    const driver = fakeDriver(new Set(["c4"]), new Set(["c5"]));
    const { events, states } = recorder();
    let saved = 0;
    const sessions = new AgentSessions(driver, { ...events, changed: () => void saved++ });
    const failed = await sessions.restore([
      { session_id: "s1", container_name: "c1", state: "READY" },
      { session_id: "s2", container_name: "c2", state: "ERRORED", reason: "OOMKilled" },
      { session_id: "s3", container_name: "c3", state: "STOPPING" },
      { session_id: "s4", container_name: "c4", state: "STARTING" },
      { session_id: "s5", container_name: "c5", state: "READY" },
    ]);
    expect(driver.starts.map((s) => s.containerName)).toEqual(["c1"]);
    expect(failed.map((f) => f.session_id)).toEqual(["s5"]);
    const byId = (a: { session_id: string }, b: { session_id: string }) =>
      a.session_id.localeCompare(b.session_id);
    expect(sessions.report().sort(byId)).toEqual([
      { session_id: "s1", container_name: "c1", state: "READY" },
      { session_id: "s2", container_name: "c2", state: "ERRORED", reason: "OOMKilled" },
      { session_id: "s4", container_name: "c4", state: "ERRORED", reason: "WorkspaceNotRunning" },
    ]);
    expect(states).toEqual(["s1:READY"]);
    expect(saved).toBeGreaterThan(0);
  });

  it("a session that errored keeps its reason in the saved set, and a restart reports it again", async () => {
    const driver = fakeDriver();
    const sessions = new AgentSessions(driver, recorder().events);
    await sessions.start("s1", "c1");
    sessions.workloadExited("c1", "EngineRestarted", "docker engine event stream ended");
    const report = sessions.report();
    expect(report).toEqual([
      { session_id: "s1", container_name: "c1", state: "ERRORED", reason: "EngineRestarted" },
    ]);
    const restarted = new AgentSessions(fakeDriver(), recorder().events);
    await restarted.restore(report);
    expect(restarted.report()).toEqual(report);
  });

  it("starts the runtime's agent command, keeps it in the saved set, and starts it again on restore", async () => {
    const pi = ["/usr/local/bin/node", "/app/runtimes/pi/agent.ts"];
    const first = fakeDriver();
    const before = new AgentSessions(first, recorder().events);
    await before.start("s1", "c1", pi);
    await before.start("s2", "c2");
    expect(first.starts.map((s) => s.command)).toEqual([
      pi,
      ["/bin/node", "/app/runtimes/reference/agent.ts"],
    ]);
    const file = tempFile();
    file.save(before.saved());
    // The hello report stays the session set alone.
    expect(before.report()[0]).toEqual({ session_id: "s1", container_name: "c1", state: "READY" });

    const second = fakeDriver();
    const after = new AgentSessions(second, recorder().events);
    expect(await after.restore(file.load())).toEqual([]);
    expect(second.starts.map((s) => s.command)).toEqual([
      pi,
      ["/bin/node", "/app/runtimes/reference/agent.ts"],
    ]);
  });

  it("mode none (an openai-chat runtime) execs nothing: READY while the workload runs, ERRORED when it exits, stopped and restored without an exec", async () => {
    const driver = fakeDriver(new Set(["c3"]));
    const { events, states } = recorder();
    const sessions = new AgentSessions(driver, events);
    expect(await sessions.start("s1", "c1", undefined, "none")).toBe("READY");
    expect(driver.starts).toEqual([]);
    expect(() => sessions.send("s1", "{}")).toThrow(/not READY/);
    await expect(sessions.start("s3", "c3", undefined, "none")).rejects.toMatchObject({ code: "NOT_FOUND" });
    const file = tempFile();
    file.save(sessions.saved());
    expect(file.load()).toMatchObject([{ session_id: "s1", state: "READY", mode: "none" }]);
    // After a runner restart: READY again, still no exec.
    const restarted = new AgentSessions(fakeDriver(), recorder().events);
    expect(await restarted.restore(file.load())).toEqual([]);
    expect(restarted.report()).toEqual([{ session_id: "s1", container_name: "c1", state: "READY" }]);
    sessions.workloadExited("c1", "ContainerExited", "exit 1");
    expect(sessions.report()).toEqual([
      { session_id: "s1", container_name: "c1", state: "ERRORED", reason: "ContainerExited" },
    ]);
    expect(await restarted.stop("s1")).toBe("STOPPED");
    expect(states).toEqual(["s1:READY", "s1:ERRORED"]);
  });

  it("send: NOT_FOUND for a session it does not hold, FAILED_PRECONDITION for one not READY", async () => {
    const driver = fakeDriver();
    const sessions = new AgentSessions(driver, recorder().events);
    await sessions.start("s1", "c1");
    sessions.send("s1", '{"type":"message"}');
    expect(driver.sent).toEqual(['{"type":"message"}']);
    expect(() => sessions.send("nope", "{}")).toThrow(expect.objectContaining({ code: "NOT_FOUND" }));
    await sessions.stop("s1");
    expect(() => sessions.send("s1", "{}")).toThrow(expect.objectContaining({ code: "FAILED_PRECONDITION" }));
  });

  it("a stop while one is under way waits for it: the agent is stopped once, STOPPING and STOPPED are reported once", async () => {
    const driver = fakeDriver();
    let stops = 0;
    const startAgent = driver.startAgent.bind(driver);
    driver.startAgent = async (...args) => {
      const agent = await startAgent(...args);
      return {
        ...agent,
        stop: async () => {
          stops++;
          await new Promise((r) => setTimeout(r, 50));
          await agent.stop();
        },
      };
    };
    const { states, events } = recorder();
    const sessions = new AgentSessions(driver, events);
    await sessions.start("s1", "c1");
    expect(await Promise.all([sessions.stop("s1"), sessions.stop("s1"), sessions.stop("s1")])).toEqual([
      "STOPPED",
      "STOPPED",
      "STOPPED",
    ]);
    expect(stops).toBe(1);
    expect(states).toEqual(["s1:READY", "s1:STOPPING", "s1:STOPPED"]);
  });

  it("refuses an agent's status frame (status frames come only from the server) and drops a too-long line; the session stays READY", async () => {
    const driver = fakeDriver();
    const frames: { type: string; payload: Record<string, unknown> }[] = [];
    const sessions = new AgentSessions(
      driver,
      { frame: (_id, f) => frames.push(f), state: () => {} },
      { limits: { maxLineBytes: 1024, bytesPerSecond: 1e9, framesPerSecond: 1e9 } },
    );
    expect(await sessions.start("s1", "c1")).toBe("READY");
    const agent = driver.starts[0]?.output;
    agent?.write('{"protocol":"compass.v1","type":"status","payload":{"state":"STOPPED"}}\n');
    agent?.write(`${"x".repeat(5000)}\n`);
    agent?.write('{"protocol":"compass.v1","type":"message","payload":{"text":"still here"}}\n');
    await new Promise((r) => setTimeout(r, 20));
    expect(frames.slice(1)).toEqual([
      {
        protocol: "compass.v1",
        type: "error",
        payload: { message: "malformed agent output", reason: FORGED_STATUS_REASON },
      },
      {
        protocol: "compass.v1",
        type: "error",
        payload: { message: "agent output line dropped", reason: "line longer than 1024 bytes" },
      },
      { protocol: "compass.v1", type: "message", payload: { text: "still here" } },
    ]);
    expect(frames.some((f) => f.type === "status")).toBe(false);
    expect(sessions.report()).toEqual([{ session_id: "s1", container_name: "c1", state: "READY" }]);
  });
});
