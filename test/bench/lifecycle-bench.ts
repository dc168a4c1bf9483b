/**
 * What the agent-session lifecycle costs end to end, and how many frames it carries.
 *
 *   node test/bench/lifecycle-bench.ts [runs] [frames]   (defaults 20 and 20000; the test bed
 *                                                       must be up: scripts/testbed up node docker pulumi image)
 *
 * The system is real: `agent-sessions serve --no-runner` and a separate `agent-sessions runner`
 * over the WebSocket, Pulumi stacks on the real dockerd, the reference agent.
 *
 * 1. Latency, run by run (one at a time): ProvisionAgentWorkspace (a new workspace: a Pulumi
 *    `up` of volume, network and container, and the adapter's readiness) → StartAgentSession → the
 *    session's READY status frame arriving on an SSE client of `GET /v1/events`. p50 and p99
 *    (nearest rank) of the whole and of each part.
 * 2. Throughput, agent → runner → server → N SSE clients (N = 1 and 10): the reference agent
 *    floods `frames` log frames; each client follows the session; the clock runs from the
 *    SendAgentMessage call to the last frame at each client. Frames per second per client, and
 *    frames delivered per second in all.
 */
import { randomBytes } from "node:crypto";
import { rmSync } from "node:fs";
import type { Frame } from "../../contracts/compass.ts";
import { removeEverything, setUpNamespace, sseEvents } from "../support/agent-system.ts";
import { System } from "../support/system.ts";
import { applyTestbedEnv } from "../support/testbed.ts";
import { percentile } from "./stats.ts";

const runs = Number(process.argv[2] ?? 20);
const floodFrames = Number(process.argv[3] ?? 20_000);
if (!Number.isInteger(runs) || runs < 1)
  throw new Error(`runs must be a positive integer, got ${process.argv[2]}`);
if (!Number.isInteger(floodFrames) || floodFrames < 1)
  throw new Error(`frames must be a positive integer, got ${process.argv[3]}`);
applyTestbedEnv();

const NS = `bench-${randomBytes(3).toString("hex")}`;
const system = new System();
const containers = new Set<string>();

/** Nearest-rank percentile. */

function row(name: string, values: number[]): string {
  const f = (v: number) => `${(v / 1000).toFixed(2)} s`.padStart(9);
  return `  ${name.padEnd(38)} p50 ${f(percentile(values, 50))}   p99 ${f(percentile(values, 99))}   min ${f(Math.min(...values))}   max ${f(Math.max(...values))}`;
}

async function rpc<T>(method: string, body: unknown): Promise<T> {
  const res = await system.rpc(method, body);
  if (res.status !== 200) throw new Error(`${method}: HTTP ${res.status} ${JSON.stringify(res.body)}`);
  return res.body as T;
}

/** When each session's READY status frame reached a client of the global event stream. */
function watchReady(): { readyAt: Map<string, number>; close(): void } {
  const readyAt = new Map<string, number>();
  const controller = new AbortController();
  void (async () => {
    const res = await fetch(`${system.url}/v1/events`, {
      headers: { authorization: `Bearer ${system.adminToken}` },
      signal: controller.signal,
    });
    for await (const e of sseEvents(res.body as unknown as AsyncIterable<Uint8Array>)) {
      const f = e.data as Frame;
      if (f.type === "status" && f.payload.state === "READY" && !readyAt.has(f.session_id))
        readyAt.set(f.session_id, performance.now());
    }
  })().catch(() => undefined);
  return { readyAt, close: () => controller.abort() };
}

/** A client following one session from its next frame; resolves when it has seen flood frame `last`. */
function floodClient(sessionId: string, last: number, signal: AbortSignal) {
  let frames = 0;
  const done = (async () => {
    const res = await fetch(`${system.url}/v1/events?session_id=${sessionId}`, {
      headers: { authorization: `Bearer ${system.adminToken}` },
      signal,
    });
    for await (const e of sseEvents(res.body as unknown as AsyncIterable<Uint8Array>)) {
      if (e.event === "gap")
        throw new Error(`client fell behind the frame buffer: ${JSON.stringify(e.data)}`);
      const f = e.data as Frame;
      if (f.type !== "log" || typeof f.payload.i !== "number") continue;
      frames += 1;
      if (f.payload.i === last) return performance.now();
    }
    throw new Error("the event stream ended before the last frame");
  })();
  return { done, frames: () => frames };
}

async function latency(): Promise<void> {
  const ready = watchReady();
  const total: number[] = [];
  const provision: number[] = [];
  const start: number[] = [];
  const readyLag: number[] = [];
  try {
    for (let i = 0; i < runs; i++) {
      const t0 = performance.now();
      const { container_name } = await rpc<{ container_name: string }>("ProvisionAgentWorkspace", {
        agent_ref: `${NS}/bench`,
        workstream: `w${i}`,
        client_request_id: `${NS}-run-${i}`,
      });
      containers.add(container_name);
      const t1 = performance.now();
      const { session_id } = await rpc<{ session_id: string }>("StartAgentSession", { container_name });
      const t2 = performance.now();
      const deadline = Date.now() + 30_000;
      while (!ready.readyAt.has(session_id) && Date.now() < deadline)
        await new Promise((r) => setTimeout(r, 5));
      const t3 = ready.readyAt.get(session_id);
      if (t3 === undefined) throw new Error(`no READY frame for ${session_id}`);
      provision.push(t1 - t0);
      start.push(t2 - t1);
      readyLag.push(t3 - t1);
      total.push(t3 - t0);
      process.stderr.write(`  run ${i + 1}/${runs}: ${((t3 - t0) / 1000).toFixed(2)} s\n`);
      // One live session per workspace is all a run needs; stop it so runs do not pile up agents.
      if (i < runs - 1) await rpc("StopAgentSession", { session_id });
    }
  } finally {
    ready.close();
  }
  console.log(
    `\nProvisionAgentWorkspace → StartAgentSession → READY on the event stream (${runs} runs, sequential)`,
  );
  console.log(row("total (provision call → READY frame)", total));
  console.log(row("ProvisionAgentWorkspace", provision));
  console.log(row("StartAgentSession (call → response)", start));
  console.log(row("start call → READY frame at client", readyLag));
}

async function throughput(): Promise<void> {
  const [container_name] = [...containers].slice(-1);
  if (!container_name) throw new Error("no workspace left from the latency runs");
  const status = await rpc<{ sessions: { session_id: string; container_name: string; state: string }[] }>(
    "GetAgentStatus",
    {},
  );
  const live = status.sessions.find((s) => s.container_name === container_name && s.state === "READY");
  if (!live) throw new Error(`no READY session in ${container_name}`);
  console.log(
    `\nFrames agent → runner → server → SSE clients (${floodFrames} log frames a flood, frame buffer default)`,
  );
  for (const clients of [1, 10]) {
    const controller = new AbortController();
    const followers = Array.from({ length: clients }, () =>
      floodClient(live.session_id, floodFrames - 1, controller.signal),
    );
    await new Promise((r) => setTimeout(r, 500)); // let every client subscribe
    const t0 = performance.now();
    await rpc("SendAgentMessage", {
      session_id: live.session_id,
      message: { type: "flood", count: floodFrames },
    });
    const ends = await Promise.all(followers.map((f) => f.done));
    controller.abort();
    const seconds = ends.map((t) => (t - t0) / 1000);
    const perClient = seconds.map((s) => floodFrames / s);
    const slowest = Math.max(...seconds);
    const counted = followers.map((f) => f.frames());
    if (counted.some((n) => n !== floodFrames))
      throw new Error(`a client missed frames: ${counted.join(", ")}`);
    console.log(
      `  ${String(clients).padStart(2)} client(s): slowest client ${slowest.toFixed(2)} s → ${Math.round(floodFrames / slowest)} frames/s per client (fastest ${Math.round(Math.max(...perClient))}), ${Math.round((clients * floodFrames) / slowest)} frames/s delivered in all`,
    );
    await new Promise((r) => setTimeout(r, 1000));
  }
}

try {
  await system.startServer();
  await system.startRunner();
  await setUpNamespace(system, NS, ["bench"]);
  console.log(`lifecycle bench: ${runs} runs, namespace ${NS}, data ${system.dataDir}`);
  await latency();
  await throughput();
} finally {
  const forced = await removeEverything(system, NS, containers);
  await system.stop();
  rmSync(system.dataDir, { recursive: true, force: true });
  if (forced.length > 0) console.error(`forced removal of ${forced.join(", ")}`);
}
