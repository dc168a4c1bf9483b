/**
 * Issue 14, "Must show" — an untrusted agent and a broken adapter against the real system: the
 * server and a runner as their own processes, real dockerd, real Pulumi stacks, the reference
 * image. Two sessions share the runner: `flood` (an agent account driven over RPCs) and `calm`
 * (a HarnessSession, so requests reach its adapter through the proxy).
 *
 * - An agent writes 200 MB without a newline: the runner drops the line (one error frame) and
 *   keeps its memory bounded; every session stays READY (no missed heartbeat, no DISCONNECTED)
 *   and answers, the flooding one included.
 * - An adapter answers a streamed request with HTTP 500 and a body that never ends: the request
 *   ends bounded (502 RESOURCE_EXHAUSTED), counted as failed, `activeRequests` back to 0.
 *
 * Peak RSS (VmHWM) of the runner and the server is printed. The runner's byte budget is raised
 * for this file (AGENT_SESSIONS_AGENT_OUTPUT_BYTES_PER_SECOND) so the whole 200 MB passes through
 * the line splitter within seconds; the throttling itself is unit-tested (runner/sessions/agent-stdout.test.ts).
 */
import { randomBytes } from "node:crypto";
import { readFileSync, rmSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Frame } from "../../contracts/compass.ts";
import { API_VERSION } from "../../contracts/resources.ts";
import { removeEverything, SessionFollower, setUpNamespace } from "../support/agent-system.ts";
import { type Json, System, until } from "../support/system.ts";
import { applyTestbedEnv } from "../support/testbed.ts";

applyTestbedEnv();

const NS = `bounds-${randomBytes(3).toString("hex")}`;
const SESSIONS = `/v1/namespaces/${NS}/harnesssessions`;
const SPEW_MB = 200;
const MiB = 1024 * 1024;
const system = new System(undefined, { AGENT_SESSIONS_AGENT_OUTPUT_BYTES_PER_SECOND: String(64 * MiB) });
const provisioned = new Set<string>();
const followers: SessionFollower[] = [];

/** VmRSS and VmHWM (peak) of a process, in bytes. */
function memoryOf(pid: number): { rss: number; peak: number } {
  const status = readFileSync(`/proc/${pid}/status`, "utf8");
  const kb = (key: string) =>
    Number(status.match(new RegExp(`^${key}:\\s+(\\d+) kB$`, "m"))?.[1] ?? 0) * 1024;
  return { rss: kb("VmRSS"), peak: kb("VmHWM") };
}
const mib = (bytes: number) => `${(bytes / MiB).toFixed(0)} MiB`;
const pidOf = (which: "server" | "runner") => {
  const pid = system[which]?.child.pid;
  if (pid === undefined) throw new Error(`no ${which} process`);
  return pid;
};

async function agentState(sessionId: string): Promise<{ state: string; reason?: string }> {
  const res = await system.rpc("GetAgentStatus", { session_id: sessionId });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return res.body.sessions[0];
}

async function send(sessionId: string, message: Record<string, unknown>): Promise<void> {
  const res = await system.rpc("SendAgentMessage", { session_id: sessionId, message });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
}

async function echoed(follower: SessionFollower, text: string): Promise<void> {
  await until(
    `the echo of ${text}`,
    () => follower.frames.some((f) => f.payload.text === `echo: ${text}`),
    30_000,
  );
}

let flood = "";
let calm = "";
let calmFollower: SessionFollower;
let floodFollower: SessionFollower;

beforeAll(async () => {
  await system.startServer();
  await system.startRunner();
  await setUpNamespace(system, NS, ["flood", "calm"]);
  const workspace = await system.rpc("ProvisionAgentWorkspace", {
    agent_ref: `${NS}/flood`,
    client_request_id: "flood-1",
  });
  expect(workspace.status, JSON.stringify(workspace.body)).toBe(200);
  provisioned.add(workspace.body.container_name);
  const started = await system.rpc("StartAgentSession", { container_name: workspace.body.container_name });
  expect(started.body.state).toBe("READY");
  flood = started.body.session_id;
  const created = await system.call("PUT", `${SESSIONS}/calm`, {
    apiVersion: API_VERSION,
    kind: "HarnessSession",
    metadata: { name: "calm", namespace: NS },
    spec: { agentRef: "calm", runtimeRef: "reference", desiredState: "running", idleTimeout: "30m" },
  });
  expect(created.status, JSON.stringify(created.body)).toBe(201);
  const ready = await until(
    "HarnessSession calm Ready",
    async () => {
      const s = (await system.call("GET", `${SESSIONS}/calm`)).body;
      return s.status?.phase === "Ready" ? s : undefined;
    },
    180_000,
  );
  calm = ready.status.sessionId;
  provisioned.add(ready.status.containerName);
  floodFollower = new SessionFollower(system, flood, "0");
  calmFollower = new SessionFollower(system, calm, "0");
  followers.push(floodFollower, calmFollower);
});

afterAll(async () => {
  for (const f of followers) await f.close();
  await system.call("DELETE", `${SESSIONS}/calm`).catch(() => undefined);
  const forced = await removeEverything(system, NS, provisioned);
  await system.stop();
  if (forced.length > 0) console.warn(`untrusted-agent: forced removal of ${forced.join(", ")}`);
  rmSync(system.dataDir, { recursive: true, force: true });
});

describe("an untrusted agent and a broken adapter cannot exhaust what serves every session", () => {
  it(`an agent writing ${SPEW_MB} MB without a newline: the line is dropped with one error frame, the runner's memory stays bounded, every session stays READY and answers`, async () => {
    const before = { runner: memoryOf(pidOf("runner")), server: memoryOf(pidOf("server")) };
    let runnerRss = before.runner.rss;
    const sampler = setInterval(() => {
      runnerRss = Math.max(runnerRss, memoryOf(pidOf("runner")).rss);
    }, 100);
    const started = Date.now();
    try {
      await send(flood, { type: "spew", mb: SPEW_MB });
      // While it floods, the other session on the runner answers.
      for (let i = 0; i < 3; i++) {
        await send(calm, { type: "message", text: `during ${i}` });
        await echoed(calmFollower, `during ${i}`);
      }
      await until(
        "the spew to end",
        () => floodFollower.frames.some((f) => f.type === "log" && f.payload.message === "spew done"),
        120_000,
      );
    } finally {
      clearInterval(sampler);
    }
    const seconds = (Date.now() - started) / 1000;
    const after = { runner: memoryOf(pidOf("runner")), server: memoryOf(pidOf("server")) };
    console.info(
      `untrusted-agent: ${SPEW_MB} MB without a newline passed in ${seconds.toFixed(1)} s; ` +
        `runner RSS ${mib(before.runner.rss)} before, ${mib(runnerRss)} at most during, peak (VmHWM) ${mib(after.runner.peak)}; ` +
        `server RSS ${mib(before.server.rss)} before, peak (VmHWM) ${mib(after.server.peak)}`,
    );

    // One error frame for the dropped line, nothing of its 200 MB stored.
    const dropped = floodFollower.frames.filter(
      (f: Frame) => f.type === "error" && f.payload.message === "agent output line dropped",
    );
    expect(dropped).toHaveLength(1);
    expect(dropped[0]?.payload.reason).toBe("line longer than 262144 bytes");
    // Bounded: the runner grew by far less than what passed through it (the unbounded buffer
    // took a simulated runner to 836 MB on this input). What it does grow is the engine stream's
    // garbage (Buffers freed at the next GC): 66-116 MiB measured at 20-65 MB/s.
    expect(runnerRss - before.runner.rss).toBeLessThan(192 * MiB);
    expect(after.runner.peak).toBeLessThan(before.runner.peak + 192 * MiB);
    expect(after.server.peak).toBeLessThan(before.server.peak + 128 * MiB);

    // No heartbeat missed: neither session went DISCONNECTED; both READY and answering.
    for (const follower of [floodFollower, calmFollower])
      expect(follower.states.filter((s) => !["STARTING", "READY"].includes(s))).toEqual([]);
    expect((await agentState(flood)).state).toBe("READY");
    expect((await agentState(calm)).state).toBe("READY");
    await send(flood, { type: "message", text: "after the spew" });
    await echoed(floodFollower, "after the spew");
  });

  it("an agent cannot forge a status frame: it arrives as an error frame, the session's state unchanged", async () => {
    await send(flood, { type: "forge" });
    await until("the refusal", () =>
      floodFollower.frames.some(
        (f) => f.type === "error" && f.payload.reason === "status frames come only from the server",
      ),
    );
    await send(flood, { type: "message", text: "after the forgery" });
    await echoed(floodFollower, "after the forgery");
    expect(floodFollower.states.filter((s) => !["STARTING", "READY"].includes(s))).toEqual([]);
    expect((await agentState(flood)).state).toBe("READY");
  });

  it("an adapter answering a streamed request with HTTP 500 and an endless body: bounded, counted as failed, activeRequests back to 0", async () => {
    const serverBefore = memoryOf(pidOf("server"));
    const reply = await fetch(`${system.url}${SESSIONS}/calm/requests`, {
      method: "POST",
      headers: { authorization: `Bearer ${system.adminToken}`, "content-type": "application/json" },
      body: JSON.stringify({ id: "endless-1", input: "reference-fault:endless-error", stream: true }),
    });
    const body = (await reply.json()) as Json;
    expect(reply.status, JSON.stringify(body)).toBe(502);
    expect(body).toMatchObject({ code: "RESOURCE_EXHAUSTED" });
    expect(body.message).toMatch(/HTTP 500.*exceeds/);
    const settled = await until("the request to be settled", async () => {
      const s = (await system.call("GET", `${SESSIONS}/calm`)).body;
      return s.status.activeRequests === 0 && s.status.lastRequestId === "endless-1" ? s : undefined;
    });
    expect(settled.status).toMatchObject({
      phase: "Ready",
      activeRequests: 0,
      lastRequestOutcome: "failed",
      errorCount: 1,
      requestCount: 1,
    });
    const serverAfter = memoryOf(pidOf("server"));
    console.info(
      `untrusted-agent: endless HTTP 500 reply ended ${reply.status}; server RSS ${mib(serverBefore.rss)} before, ` +
        `${mib(serverAfter.rss)} after, peak (VmHWM) ${mib(serverAfter.peak)}; runner peak (VmHWM) ${mib(memoryOf(pidOf("runner")).peak)}`,
    );
    expect(serverAfter.peak).toBeLessThan(serverBefore.peak + 64 * MiB);
    // The session still serves: its agent answers.
    await send(calm, { type: "message", text: "after the endless reply" });
    await echoed(calmFollower, "after the endless reply");
  });
});
