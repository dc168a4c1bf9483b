/**
 * Issue 4, "Must show" — chaos: the runner and the server are killed with SIGKILL (no goodbye,
 * no flush) while an agent streams, and brought back. Real processes, the real WebSocket, real
 * dockerd and Pulumi.
 *
 * What "READY again" means after a runner SIGKILL: the agent's exec stream dies with the runner
 * (the engine closes the agent's pipes, the reference agent exits), so no agent survives it. The
 * runner keeps its authoritative session set in its data dir (runner/sessions/session-file.ts); restarted,
 * it starts each live agent again in its workspace (resuming from the workspace state: the agent's
 * `starts` goes up) before its hello reports the set, and the server, inside the reattach window,
 * moves the session from DISCONNECTED back to READY under the same session_id. Frames the agent
 * wrote that never reached the server are lost with the process; every frame the server stored
 * has one seq, and clients resuming with Last-Event-ID see each exactly once, without gaps.
 */
import { randomBytes } from "node:crypto";
import { rmSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Frame } from "../../contracts/compass.ts";
import {
  agentPids,
  agentStarts,
  containersOf,
  removeEverything,
  SessionFollower,
  setUpNamespace,
  stacksOf,
  statesOf,
} from "../support/agent-system.ts";
import { followEvents, type SseEvent, System, until } from "../support/system.ts";
import { applyTestbedEnv } from "../support/testbed.ts";

applyTestbedEnv();

const NS = `chaos-${randomBytes(3).toString("hex")}`;
const WINDOW_MS = 10_000;
const system = new System(undefined, {
  AGENT_SESSIONS_REATTACH_WINDOW_MS: String(WINDOW_MS),
  // Keep every frame of the test in the buffer, so a replay from 0 is the whole truth.
  AGENT_SESSIONS_FRAME_BUFFER_SIZE: "200000",
  // The server is killed while a provisioning is in flight: every step a full `pulumi up` (the
  // fast path would answer a first create within the 3 s the test waits before the kill).
  AGENT_SESSIONS_FAST_PATH: "off",
});
const provisioned = new Set<string>();
const followers: SessionFollower[] = [];

beforeAll(async () => {
  await system.startServer();
  await system.startRunner();
  await setUpNamespace(system, NS, ["k", "m"]);
});

afterAll(async () => {
  for (const f of followers) await f.close();
  const forced = await removeEverything(system, NS, provisioned);
  await system.stop();
  if (forced.length > 0) console.warn(`agent-chaos: forced removal of ${forced.join(", ")}`);
  rmSync(system.dataDir, { recursive: true, force: true });
});

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function provision(agent: string, client_request_id: string): Promise<string> {
  const res = await system.rpc("ProvisionAgentWorkspace", { agent_ref: `${NS}/${agent}`, client_request_id });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  provisioned.add(res.body.container_name);
  return res.body.container_name;
}

async function state(sessionId: string): Promise<{ state: string; reason?: string }> {
  const res = await system.rpc("GetAgentStatus", { session_id: sessionId });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return res.body.sessions[0];
}

/** Every frame of the session the store holds, by a fresh client replaying from seq 0. */
async function replay(sessionId: string, untilSeq: number): Promise<SseEvent[]> {
  const all = followEvents(system, `?session_id=${sessionId}`, "0");
  await until(`a replay up to seq ${untilSeq}`, () => all.events.some((e) => Number(e.id) >= untilSeq));
  await all.close();
  return all.events;
}

function seqs(events: SseEvent[]): number[] {
  return events.map((e) => Number(e.id));
}

/** 1..n, each once, in order. */
function expectContiguous(ids: number[]): void {
  expect(ids.length).toBeGreaterThan(0);
  expect(new Set(ids).size).toBe(ids.length);
  expect(ids).toEqual(Array.from({ length: ids.length }, (_, i) => i + 1));
}

describe("chaos: SIGKILL of the runner and of the server, end to end", () => {
  let container = "";
  let session = "";

  it("SIGKILL the runner mid-stream and restart it inside the window → READY again; a client resuming with Last-Event-ID sees every frame exactly once, with no gap in seq", async () => {
    container = await provision("k", "k-first");
    const started = await system.rpc("StartAgentSession", { container_name: container });
    expect(started.body.state).toBe("READY");
    session = started.body.session_id;

    const first = followEvents(system, `?session_id=${session}`, "0");
    expect(
      (
        await system.rpc("SendAgentMessage", {
          session_id: session,
          message: { type: "flood", count: 50_000 },
        })
      ).status,
    ).toBe(200);
    await until("the flood to be streaming", () => first.events.length > 2_000);
    // Mid-stream: the runner dies, and so does this client's connection (it will resume).
    await system.kill("runner", "SIGKILL");
    await first.close();
    const lastSeen = first.events.at(-1)?.id ?? "0";
    const startedAgain = Date.now();
    await system.startRunner();
    expect(Date.now() - startedAgain).toBeLessThan(WINDOW_MS);

    const resumed = followEvents(system, `?session_id=${session}`, lastSeen);
    await until("READY again after the runner's restart", () => {
      const states = statesOf([...first.events, ...resumed.events], session);
      return (
        states.lastIndexOf("READY") > states.indexOf("DISCONNECTED(RunnerDisconnected)") &&
        states.includes("DISCONNECTED(RunnerDisconnected)")
      );
    });
    expect((await state(session)).state).toBe("READY");
    // The restarted runner started the agent again in its workspace: one agent, one more start.
    await until("the restarted agent's first frame", () => agentStarts(resumed.events, session).length === 1);
    expect(agentStarts(resumed.events, session)).toEqual([{ starts: 2, messages: 0 }]);
    expect(await agentPids(container)).toHaveLength(1);
    expect(
      (
        await system.rpc("SendAgentMessage", {
          session_id: session,
          message: { type: "message", text: "after the kill" },
        })
      ).status,
    ).toBe(200);
    await until("the echo", () =>
      resumed.events.some((e) => (e.data as Frame).payload.text === "echo: after the kill"),
    );
    await resumed.close();

    // Exactly once, no gap: what the two connections saw is 1..n, and it is what the store has.
    const seen = [...first.events, ...resumed.events];
    expectContiguous(seqs(seen));
    const stored = await replay(session, Number(seen.at(-1)?.id));
    expect(seqs(stored).slice(0, seen.length)).toEqual(seqs(seen));
    expect(stored.slice(0, seen.length).map((e) => e.data)).toEqual(seen.map((e) => e.data));
    const states = statesOf(seen, session);
    expect(states).toEqual(["STARTING", "READY", "DISCONNECTED(RunnerDisconnected)", "READY"]);
    const flooded = seen.filter((e) => (e.data as Frame).type === "log" && "i" in (e.data as Frame).payload);
    console.info(`agent-chaos: ${flooded.length} of 50000 flood frames reached the server before the kill`);
  });

  it("SIGKILL the runner and let the window expire → ERRORED exactly once", async () => {
    const follower = new SessionFollower(system, session, "0");
    followers.push(follower);
    await until("the follower to catch up", () => follower.states.length >= 4);
    const seen = follower.states.length;
    await system.kill("runner", "SIGKILL");
    await until(
      "ERRORED after the window",
      () => follower.states.slice(seen).includes("ERRORED(ReattachExpired)"),
      WINDOW_MS + 20_000,
    );
    // The runner comes back after the window, restarts the agent it remembers and reports it;
    // the server keeps the session ERRORED (never revived behind the client's back) and has the
    // agent stopped there.
    await system.startRunner();
    await until(
      "the agent to be stopped on the runner",
      async () => (await agentPids(container)).length === 0,
      30_000,
    );
    await sleep(2_000);
    expect(follower.states.slice(seen)).toEqual([
      "DISCONNECTED(RunnerDisconnected)",
      "ERRORED(ReattachExpired)",
    ]);
    expect(follower.states.filter((s) => s.startsWith("ERRORED"))).toHaveLength(1);
    expect(await state(session)).toMatchObject({ state: "ERRORED", reason: "ReattachExpired" });
  });

  it("SIGKILL the server and restart it → state recovered from SQLite, runners reattach, no duplicate containers, no orphaned stacks", async () => {
    // A READY session streaming, and a provisioning in flight when the server dies.
    const reload = await system.rpc("ReloadAgentSession", { session_id: session });
    expect(reload.body).toEqual({ session_id: session, state: "READY" });
    const follower = new SessionFollower(system, session, "0");
    followers.push(follower);
    await until(
      "the follower to see the reload",
      () => follower.states.at(-1) === "READY" && follower.states.length > 6,
    );
    const inflight = system
      .rpc("ProvisionAgentWorkspace", { agent_ref: `${NS}/m`, client_request_id: "m-first" })
      .catch((error: unknown) => ({ status: 0, body: String(error) }));
    await sleep(3_000);
    const before = follower.events.length;
    await system.kill("server", "SIGKILL");
    expect((await inflight).status).toBe(0); // the connection died with the server
    await system.startServer(); // same data dir, same port

    // Recovered from SQLite: the session, its frames and the runner's id; the runner reattaches
    // by itself (backoff) and its hello puts the session back to READY.
    await until(
      "the runner to reattach and the session to be READY",
      async () => (await state(session)).state === "READY",
      60_000,
    );
    // The RPC says READY first; the follower's stream, reconnected to the new server, may still be
    // catching up with the frames that say so.
    const seenBefore = statesOf(follower.events.slice(0, before), session).length;
    await until(
      "the follower to see the session come back",
      () => follower.states.length >= seenBefore + 2,
      30_000,
    );
    const statesAfter = follower.states.slice(seenBefore);
    expect(statesAfter).toEqual(["DISCONNECTED(RunnerDisconnected)", "READY"]);
    expect(await agentPids(container)).toHaveLength(1); // the agent lived through it: same process
    expect(
      (
        await system.rpc("SendAgentMessage", {
          session_id: session,
          message: { type: "message", text: "server is back" },
        })
      ).status,
    ).toBe(200);
    await until("the echo", () => follower.frames.some((f) => f.payload.text === "echo: server is back"));
    expectContiguous(seqs(follower.events));

    // The interrupted provisioning, retried with its client_request_id, completes under the same
    // name; nothing was provisioned twice and no stack is left without its workspace.
    const retried = await provision("m", "m-first");
    const again = await provision("m", "m-first");
    expect(again).toBe(retried);
    const containers = await containersOf(NS);
    expect(containers.map((c) => c.name).sort()).toEqual([container, retried].sort());
    expect(containers.every((c) => c.state === "running")).toBe(true);
    const stacks = (await stacksOf(system)).filter((s) => s.startsWith(`${NS}--`));
    expect(stacks.sort()).toEqual(containers.map((c) => `${NS}--${c.session}`).sort());
  });
});
