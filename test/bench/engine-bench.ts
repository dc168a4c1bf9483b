/**
 * A session's lifecycle on Docker beside the same on Kubernetes: create → Ready, stop, resume →
 * Ready, p50/p99 per engine in one table.
 *
 *   node test/bench/engine-bench.ts [runs] [warmups]   (defaults 10 and 1; the test bed must be up:
 *                                                     scripts/testbed up node docker pulumi pulumi-kubernetes image kubernetes)
 *
 * Everything is real: StackManager (stacks/) (Pulumi CLI, the Docker provider plugin and the
 * Kubernetes provider, the policy pack, a file backend on a temp dir), the test bed's dockerd and
 * single-node cluster, the reference image. Per run and engine, one new session goes through:
 *
 *   create → Ready   StackManager.up, then the adapter answering GET /readyz at outputs.endpoint
 *                    (Docker: the container's address; Kubernetes: the ClusterIP Service through
 *                    kube-proxy, from the node)
 *   stop             StackManager.scaleDown, then until the engine has no container (Docker,
 *                    by session label) / no pod object at all (Kubernetes, terminating ones included)
 *   resume → Ready   StackManager.resume, then /readyz at the endpoint it returns
 *   destroy          StackManager.destroy (cleanup, timed as well; the volume/PVC goes with it)
 *
 * Each step is shown whole and, beneath it, the part spent in the StackManager call (the rest is
 * waiting for the engine to reach the state). Within a run both engines go one after the other,
 * which one first alternating run by run, so drift on the machine weighs on both alike; warm-ups
 * (first use of plugins, page cache, the image on each engine) are not counted. Both engines get
 * the SessionSpec's default resources. Every session is destroyed even when a step fails, with a
 * last-resort removal by label/name when destroy itself fails; a failed run is reported and left
 * out of the figures. SIGINT/SIGTERM: the current run finishes its cleanup, then the bench stops
 * and prints what it has (a second signal exits at once). Percentiles are nearest-rank: with
 * fewer than 100 runs, p99 is the slowest run.
 */
import { rmSync } from "node:fs";
import type { SessionOutputs, SessionSpecInput } from "../../contracts/session-spec.ts";
import { workloadName } from "../../contracts/session-spec.ts";
import { ensureNamespace, type KubeClients, kubeClients } from "../support/kube-harness.ts";
import {
  dockerClient,
  dockerObjectsOf,
  removeSessionLeftovers,
  stackManagerFor,
  tempDir,
  uniqueName,
} from "../support/session-harness.ts";
import { applyTestbedEnv, referenceImage } from "../support/testbed.ts";
import { percentile } from "./stats.ts";

const engines = ["docker", "kubernetes"] as const;
type Engine = (typeof engines)[number];
const steps = ["create→Ready", "stop", "resume→Ready", "destroy"] as const;
type Step = (typeof steps)[number];

const runs = Number(process.argv[2] ?? 10);
const warmups = Number(process.argv[3] ?? 1);
if (!Number.isInteger(runs) || runs < 1)
  throw new Error(`runs must be a positive integer, got ${process.argv[2]}`);
if (!Number.isInteger(warmups) || warmups < 0)
  throw new Error(`warmups must be a non-negative integer, got ${process.argv[3]}`);

/** Where the session objects live on Kubernetes (the SessionSpec's default). */
const kubernetesNamespace = "agent-sessions";
/** The sessions' own namespace (the stack name's first half; a label on Docker). */
const namespace = "bench";
const readyTimeoutMs = 120_000;
const goneTimeoutMs = 120_000;

applyTestbedEnv();
const image = referenceImage().image;
const docker = dockerClient();
await docker.ping().catch((error: unknown) => {
  throw new Error(`dockerd does not answer (${String(error)}): run scripts/testbed up docker`);
});
const kube: KubeClients = await kubeClients();
await ensureNamespace(kube.core, kubernetesNamespace);
const dataDir = tempDir("engine-bench");
const { manager } = await stackManagerFor(dataDir);
const secrets = { credentials: { MODEL_API_KEY: "bench" }, adapterToken: "bench-token" };

let interrupted = false;
for (const signal of ["SIGINT", "SIGTERM"] as const) {
  process.on(signal, () => {
    if (interrupted) process.exit(130);
    interrupted = true;
    process.stderr.write(`${signal}: stopping after this run's cleanup (again to exit at once)\n`);
  });
}

/**
 * Where the cluster enforces NetworkPolicy (the 1.35 test bed exports AGENT_SESSIONS_RUNNER_CIDR),
 * the session admits the bench's own address, as it would its runner's: the bench probes the adapter.
 */
const runnerCidr = process.env.AGENT_SESSIONS_RUNNER_CIDR
  ? { runnerCidr: process.env.AGENT_SESSIONS_RUNNER_CIDR }
  : {};

function spec(engine: Engine, name: string): SessionSpecInput {
  return {
    namespace,
    name,
    engine,
    image,
    contract: "v1alpha2",
    ...(engine === "kubernetes" ? { kubernetes: { namespace: kubernetesNamespace, ...runnerCidr } } : {}),
  };
}

/** Polls `probe` every 50 ms until it is true; throws after `timeoutMs` with the last error. */
async function poll(what: string, timeoutMs: number, probe: () => Promise<boolean>): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      if (await probe()) return;
    } catch (error) {
      last = error;
    }
    if (Date.now() > deadline)
      throw new Error(`timed out after ${timeoutMs / 1000} s waiting for ${what}${last ? `: ${last}` : ""}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** The adapter answering /readyz at the stack's endpoint. */
async function adapterReady(outputs: SessionOutputs): Promise<void> {
  if (!outputs.endpoint) throw new Error(`no endpoint in the stack outputs (replicas ${outputs.replicas})`);
  await poll(`the adapter at ${outputs.endpoint}`, readyTimeoutMs, async () => {
    const res = await fetch(`http://${outputs.endpoint}/readyz`, { signal: AbortSignal.timeout(2000) });
    return res.ok;
  });
}

const kubeSelector = (name: string) =>
  `agent-sessions.dev/session=${name},agent-sessions.dev/namespace=${namespace}`;

/** The engine runs nothing of the session any more: no container / no pod object. */
async function workloadGone(engine: Engine, name: string): Promise<void> {
  await poll(`the ${engine} workload of ${name} to be gone`, goneTimeoutMs, async () => {
    if (engine === "docker") return (await dockerObjectsOf(docker, name)).containers.length === 0;
    const pods = await kube.core.listNamespacedPod({
      namespace: kubernetesNamespace,
      labelSelector: kubeSelector(name),
    });
    return pods.items.length === 0;
  });
}

/** After a failed destroy: the session's engine objects by label (Docker) or by name (Kubernetes). */
async function removeLeftovers(engine: Engine, name: string): Promise<void> {
  if (engine === "docker") {
    await removeSessionLeftovers(docker, name);
    return;
  }
  const base = workloadName(namespace, name);
  const options = { namespace: kubernetesNamespace };
  const ignore = () => undefined;
  await kube.apps.deleteNamespacedDeployment({ name: base, ...options }).catch(ignore);
  await kube.core.deleteNamespacedService({ name: base, ...options }).catch(ignore);
  await kube.networking.deleteNamespacedNetworkPolicy({ name: base, ...options }).catch(ignore);
  await kube.core.deleteNamespacedSecret({ name: `${base}-credentials`, ...options }).catch(ignore);
  await kube.core
    .deleteNamespacedPersistentVolumeClaim({ name: `${base}-workspace`, ...options })
    .catch(ignore);
}

type Timing = { total: number; call: number };

/** Times `call` (the StackManager operation) and then `until` (the engine reaching the state). */
async function timed<T>(call: () => Promise<T>, until: (result: T) => Promise<void>): Promise<Timing> {
  const started = performance.now();
  const result = await call();
  const called = performance.now();
  await until(result);
  return { total: performance.now() - started, call: called - started };
}

/** One session through its life on `engine`; destroyed whatever happens. */
async function run(engine: Engine, label: string): Promise<Record<Step, Timing>> {
  const name = uniqueName(`${engine === "docker" ? "dk" : "k8s"}-${label}`);
  const out = {} as Record<Step, Timing>;
  let failure: unknown;
  try {
    out["create→Ready"] = await timed(() => manager.up(spec(engine, name), secrets), adapterReady);
    out.stop = await timed(
      () => manager.scaleDown(namespace, name),
      () => workloadGone(engine, name),
    );
    out["resume→Ready"] = await timed(() => manager.resume(namespace, name), adapterReady);
  } catch (error) {
    failure = error;
  }
  try {
    if (await manager.exists(namespace, name))
      out.destroy = await timed(
        () => manager.destroy(namespace, name),
        async () => undefined,
      );
  } catch (error) {
    process.stderr.write(`  destroy of ${engine} session ${name} failed: ${String(error)}\n`);
    failure ??= error;
  }
  if (failure !== undefined || out.destroy === undefined) {
    await removeLeftovers(engine, name).catch((error: unknown) =>
      process.stderr.write(`  leftover removal of ${name} failed: ${String(error)}\n`),
    );
    throw failure ?? new Error(`the stack of ${name} was gone before destroy`);
  }
  return out;
}

/** Nearest-rank percentile. */

const samples: Record<Engine, Record<Step, Timing>[]> = { docker: [], kubernetes: [] };
const failures: Record<Engine, string[]> = { docker: [], kubernetes: [] };
const seconds = (ms: number) => (ms / 1000).toFixed(2);
const describe = (r: Record<Step, Timing>) =>
  steps.map((s) => `${s} ${seconds(r[s].total)}s (call ${seconds(r[s].call)}s)`).join(", ");

try {
  for (let i = 0; i < warmups && !interrupted; i++) {
    // First use of each path (plugins, page cache, image on the node), not counted.
    for (const engine of engines) {
      process.stderr.write(`warm-up ${i + 1}/${warmups} ${engine}… `);
      try {
        process.stderr.write(`${describe(await run(engine, `w${i}`))}\n`);
      } catch (error) {
        process.stderr.write(`FAILED: ${String(error)}\n`);
      }
    }
  }
  for (let i = 0; i < runs && !interrupted; i++) {
    for (const engine of i % 2 === 0 ? engines : [...engines].reverse()) {
      process.stderr.write(`run ${i + 1}/${runs} ${engine.padEnd(10)} `);
      try {
        const result = await run(engine, `r${i}`);
        samples[engine].push(result);
        process.stderr.write(`${describe(result)}\n`);
      } catch (error) {
        failures[engine].push(String(error));
        process.stderr.write(`FAILED: ${String(error)}\n`);
      }
    }
  }
} finally {
  rmSync(dataDir, { recursive: true, force: true });
}

const cell = (values: number[], p: number) => (values.length ? seconds(percentile(values, p)) : "—");
const counted = Math.min(...engines.map((e) => samples[e].length));
console.log(
  `\nSession lifecycle per engine, seconds; runs counted: ${engines.map((e) => `${e} ${samples[e].length}`).join(", ")}` +
    ` of ${runs} (nearest-rank percentiles${counted < 100 ? ", so p99 = the slowest run" : ""})\n`,
);
const widths = [30, 11, 7, 15, 7, 10];
const line = (cells: string[]) =>
  console.log(
    cells.map((c, i) => (i === 0 ? c.padEnd(widths[0] ?? 0) : c.padStart(widths[i] ?? 0))).join("  "),
  );
line(["step", "docker p50", "p99", "kubernetes p50", "p99", "k8s/docker"]);
const rows: [string, Step, keyof Timing][] = steps.flatMap((step): [string, Step, keyof Timing][] => [
  [step, step, "total"],
  [step === "destroy" ? "" : "  of which StackManager call", step, "call"],
]);
for (const [label, step, part] of rows) {
  if (!label) continue;
  const values = (e: Engine) => samples[e].map((r) => r[step][part]);
  const [d, k] = [values("docker"), values("kubernetes")];
  const ratio = d.length && k.length ? `${(percentile(k, 50) / percentile(d, 50)).toFixed(1)}×` : "—";
  line([label, cell(d, 50), cell(d, 99), cell(k, 50), cell(k, 99), ratio]);
}
console.log(
  "\ncreate→Ready / resume→Ready: StackManager.up / resume, then until the adapter answers /readyz at outputs.endpoint;\n" +
    "stop: StackManager.scaleDown, then until no container (Docker) / no pod object (Kubernetes) is left;\n" +
    "destroy: StackManager.destroy of everything including the volume/PVC, and the stack's removal.",
);
for (const engine of engines)
  for (const failure of failures[engine]) console.log(`FAILED ${engine} run: ${failure.slice(0, 500)}`);
if (failures.docker.length + failures.kubernetes.length > 0) process.exitCode = 1;
