/**
 * Claim → READY with the warm pool, beside the cold path without it, in the same run.
 *
 *   node test/bench/warm-pool-bench.ts [warmRuns] [coldRuns] [poolSize]   (defaults 10, 3, 2;
 *                                    the test bed must be up: scripts/testbed up node docker pulumi image)
 *
 * The system is real: `agent-sessions serve --no-runner` and a separate `agent-sessions runner`
 * over the WebSocket, Pulumi stacks on the real dockerd, the reference agent. Two AgentRuntimes
 * of the same image: `pooled` (spec.warmPool.size = poolSize) and `cold` (no pool), one Agent on
 * each. A run is one SpawnAgent (its answer comes once the session is READY), timed from the
 * call to the answer; then RemoveAgentWorkspace (not timed). Warm runs wait until the pool is
 * full again first, so each measures a claim, not a fallback (a fallback is counted and shown).
 */
import { randomBytes } from "node:crypto";
import { rmSync } from "node:fs";
import { API_VERSION } from "../../contracts/resources.ts";
import {
  agentPids,
  containersOf,
  removeEverything,
  setUpNamespace,
  stacksOf,
} from "../support/agent-system.ts";
import { System, until } from "../support/system.ts";
import { applyTestbedEnv, referenceImage } from "../support/testbed.ts";
import { workloadName } from "../../contracts/session-spec.ts";
import { percentile } from "./stats.ts";

const warmRuns = Number(process.argv[2] ?? 10);
const coldRuns = Number(process.argv[3] ?? 3);
const poolSize = Number(process.argv[4] ?? 2);
for (const [name, v] of [
  ["warmRuns", warmRuns],
  ["coldRuns", coldRuns],
  ["poolSize", poolSize],
] as const)
  if (!Number.isInteger(v) || v < 1) throw new Error(`${name} must be a positive integer, got ${v}`);
applyTestbedEnv();

const NS = `wpb-${randomBytes(3).toString("hex")}`;
const system = new System();
const containers = new Set<string>();

/** Nearest-rank percentile. */

function row(name: string, values: number[]): string {
  const f = (v: number) => `${v.toFixed(0)} ms`.padStart(9);
  return `  ${name.padEnd(34)} n ${String(values.length).padStart(3)}   p50 ${f(percentile(values, 50))}   p99 ${f(percentile(values, 99))}   min ${f(Math.min(...values))}   max ${f(Math.max(...values))}`;
}

async function call(method: string, path: string, body: unknown): Promise<void> {
  const res = await system.call(method, path, body);
  if (res.status >= 300) throw new Error(`${method} ${path}: HTTP ${res.status} ${JSON.stringify(res.body)}`);
}

async function putRuntime(name: string, size: number | undefined): Promise<void> {
  await call("PUT", `/v1/namespaces/${NS}/agentruntimes/${name}`, {
    apiVersion: API_VERSION,
    kind: "AgentRuntime",
    metadata: { name, namespace: NS },
    spec: {
      image: referenceImage().image,
      contract: "v1alpha2",
      capabilities: ["streaming"],
      approved: true,
      ...(size !== undefined ? { warmPool: { size } } : {}),
    },
  });
}

/** Unclaimed pool containers of `agent` with their agent pre-started. */
async function poolReady(agent: string): Promise<number> {
  let ready = 0;
  for (const c of await containersOf(NS))
    if (c.session.startsWith(`pool-${agent}-`) && c.state === "running" && !containers.has(c.name))
      if ((await agentPids(c.name)).length === 1) ready += 1;
  return ready;
}

/** One SpawnAgent, timed to its READY answer; then the workspace is removed. */
async function spawnOnce(agent: string): Promise<{ ms: number; container: string }> {
  const started = performance.now();
  const res = await system.rpc("SpawnAgent", { agent_ref: `${NS}/${agent}`, client_request_id: "" });
  const ms = performance.now() - started;
  if (res.status !== 200 || res.body.state !== "READY")
    throw new Error(`SpawnAgent ${agent}: HTTP ${res.status} ${JSON.stringify(res.body)}`);
  const container: string = res.body.container_name;
  containers.add(container);
  const removed = await system.rpc("RemoveAgentWorkspace", { container_name: container });
  if (removed.status !== 200) throw new Error(`RemoveAgentWorkspace: ${JSON.stringify(removed.body)}`);
  containers.delete(container);
  return { ms, container };
}

async function main(): Promise<void> {
  await system.startServer();
  await system.startRunner();
  await setUpNamespace(system, NS, []);
  await putRuntime("pooled", poolSize);
  await putRuntime("cold", undefined);
  for (const [agent, runtimeRef] of [
    ["w", "pooled"],
    ["c", "cold"],
  ])
    await call("PUT", `/v1/namespaces/${NS}/agents/${agent}`, {
      apiVersion: API_VERSION,
      kind: "Agent",
      metadata: { name: agent, namespace: NS },
      spec: { runtimeRef },
    });

  const fillStarted = performance.now();
  await until("pool full", async () => (await poolReady("w")) === poolSize, 600_000);
  console.log(`pool of ${poolSize} filled in ${((performance.now() - fillStarted) / 1000).toFixed(1)} s`);

  const warm: number[] = [];
  let fallbacks = 0;
  for (let i = 0; i < warmRuns; i++) {
    await until("pool full", async () => (await poolReady("w")) === poolSize, 600_000);
    const { ms, container } = await spawnOnce("w");
    if (container.startsWith(workloadName(NS, "pool-w-"))) warm.push(ms);
    else fallbacks += 1;
    console.log(`  warm run ${i + 1}: ${ms.toFixed(0)} ms (${container})`);
  }
  const cold: number[] = [];
  for (let i = 0; i < coldRuns; i++) {
    const { ms, container } = await spawnOnce("c");
    cold.push(ms);
    console.log(`  cold run ${i + 1}: ${ms.toFixed(0)} ms (${container})`);
  }

  console.log(`\nSpawnAgent → READY (namespace ${NS}, pool size ${poolSize})`);
  if (warm.length > 0) console.log(row("warm pool (claim)", warm));
  console.log(row("cold (Pulumi up + agent start)", cold));
  if (fallbacks > 0) console.log(`  warm runs that found no ready entry (fell back to cold): ${fallbacks}`);
}

try {
  await main();
} finally {
  await putRuntime("pooled", 0).catch(() => undefined);
  await until(
    "pool emptied",
    // Containers go first, then networks and volumes, then the stacks.
    async () => (await stacksOf(system)).every((s) => !s.startsWith(`${NS}--pool-`)),
    300_000,
  ).catch(() => undefined);
  const forced = await removeEverything(system, NS, containers);
  if (forced.length > 0) console.warn(`forced removal of ${forced.join(", ")}`);
  await system.stop();
  rmSync(system.dataDir, { recursive: true, force: true });
}
