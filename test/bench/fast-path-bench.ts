/**
 * Create, stop and resume, today's full path (every step a `pulumi up`) beside the fast path
 * (runner/engine/fast-path.ts: the engine at once, the stack recorded in the background), and both beside
 * the engine floor, on Docker or Kubernetes: a plain container (a plain pod) of the same image to
 * its adapter's first HTTP answer.
 *
 *   node test/bench/fast-path-bench.ts [runs] [--engine docker|kubernetes]
 *     (runs default 3, engine default docker; the test bed must be up:
 *      scripts/testbed up node docker pulumi image, and kubernetes pulumi-kubernetes for Kubernetes)
 *
 * Everything is real: the runner's driver (runner/docker/driver.ts, runner/kubernetes/driver.ts) over
 * StackManager (stacks/) (Pulumi CLI, the providers, the policy pack, a file backend on a temp dir),
 * the test bed's dockerd or cluster, the reference image. Per run and path one new session goes:
 * create → Ready (provision: the adapter answered /readyz), stop (scaleDown returned; nothing
 * runs), resume → Ready (provision again), settle (the background recording `up` of the resume
 * finished; 0 on the full path), heal (the workload killed outside — `docker kill`, the pod
 * deleted — to provision answering Ready again), then destroy. A first create takes the fast path
 * too (`fastCreate`; a runner turns it off with AGENT_SESSIONS_FAST_CREATE=off); "create settles" is its
 * background recording. The paths alternate which goes first run by run.
 * p50 is nearest-rank. On Kubernetes the sessions and the floor pods live in a namespace of their
 * own, deleted at the end.
 */
import { rmSync } from "node:fs";
import { loadavg } from "node:os";
import { parseArgs } from "node:util";
import { KubeConfig } from "@kubernetes/client-node";
import { Labels, workloadName } from "../../contracts/session-spec.ts";
import { DockerDriver } from "../../runner/docker/driver.ts";
import { KubernetesDriver } from "../../runner/kubernetes/driver.ts";
import { type KubeClients, kubeClients } from "../support/kube-harness.ts";
import { dockerClient, stackManagerFor, tempDir, uniqueName } from "../support/session-harness.ts";
import { applyTestbedEnv, referenceImage } from "../support/testbed.ts";
import { p50 } from "./stats.ts";

const { values: flags, positionals } = parseArgs({
  options: { engine: { type: "string", default: "docker" } },
  allowPositionals: true,
});
const runs = Number(positionals[0] ?? 3);
if (!Number.isInteger(runs) || runs < 1)
  throw new Error(`runs must be a positive integer, got ${positionals[0]}`);
const engine = flags.engine;
if (engine !== "docker" && engine !== "kubernetes")
  throw new Error(`--engine must be docker or kubernetes, got ${engine}`);
applyTestbedEnv();
const image = referenceImage().image;
const docker = dockerClient();
const dataDir = tempDir("fast-path-bench");
const { manager } = await stackManagerFor(dataDir);
const secrets = { credentials: { MODEL_API_KEY: "bench" }, adapterToken: "bench-token-0123456789" };
/** Kubernetes: the namespace of this run's session objects and floor pods. */
const k8sNamespace = uniqueName("bench-fast");
let kube: KubeClients | undefined;

type Driver = DockerDriver | KubernetesDriver;
function makeDrivers(): { full: Driver; fast: Driver } {
  if (engine === "docker")
    return {
      full: new DockerDriver(docker, manager, { fastPath: false }),
      fast: new DockerDriver(docker, manager, { fastPath: true }),
    };
  const kc = new KubeConfig();
  kc.loadFromDefault();
  // The runner runs on the host here: the pods see it at the host link's address, which the test
  // bed's env exports as AGENT_SESSIONS_RUNNER_CIDR.
  const cidr = process.env.AGENT_SESSIONS_RUNNER_CIDR;
  if (!cidr) throw new Error('AGENT_SESSIONS_RUNNER_CIDR is not set: eval "$(scripts/testbed env)"');
  const options = { namespace: k8sNamespace, runnerCidr: cidr };
  return {
    full: new KubernetesDriver(kc, manager, { ...options, fastPath: false }),
    fast: new KubernetesDriver(kc, manager, { ...options, fastPath: true, fastCreate: true }),
  };
}
const drivers = makeDrivers();
if (engine === "kubernetes") kube = await kubeClients();

type Path = keyof typeof drivers;
const steps = ["create", "createSettle", "stop", "resume", "settle", "heal"] as const;
const samples: Record<Path, Record<(typeof steps)[number], number[]>> = {
  full: { create: [], createSettle: [], stop: [], resume: [], settle: [], heal: [] },
  fast: { create: [], createSettle: [], stop: [], resume: [], settle: [], heal: [] },
};
const labels: Record<(typeof steps)[number], string> = {
  create: "create→Ready",
  createSettle: "create settles",
  stop: "stop",
  resume: "resume→Ready",
  settle: "resume settles",
  heal: "killed→Ready",
};
const floor: number[] = [];

async function timed(fn: () => Promise<unknown>): Promise<number> {
  const t0 = performance.now();
  await fn();
  return performance.now() - t0;
}

/**
 * Polls /readyz. Through a Kubernetes ClusterIP, not faster than every 100 ms: a Node client
 * retrying every 10 ms while the Service has no endpoints yet kept getting ECONNREFUSED long
 * after curl got through (seen on the test bed's 1.20 kube-proxy).
 */
const pollMs = engine === "kubernetes" ? 100 : 10;
async function readyz(address: string, timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      if ((await fetch(`http://${address}/readyz`, { signal: AbortSignal.timeout(1000) })).ok) return;
    } catch {
      // not yet
    }
    if (Date.now() > deadline) throw new Error(`no /readyz at ${address}`);
    await new Promise((r) => setTimeout(r, pollMs));
  }
}

const floorEnv = { ADAPTER_PORT: "8080", AGENT_WORKSPACE: "/tmp", ADAPTER_TOKEN: "floor" };

/** The floor: a plain container of the image (default bridge, no Pulumi) to its first /readyz answer. */
async function dockerFloor(): Promise<number> {
  const t0 = performance.now();
  const container = await docker.createContainer({
    name: uniqueName("bench-floor"),
    Image: image,
    Env: Object.entries(floorEnv).map(([k, v]) => `${k}=${v}`),
    Labels: { "agent-sessions.dev/bench": "floor" },
  });
  try {
    await container.start();
    const ip = Object.values((await container.inspect()).NetworkSettings.Networks)[0]?.IPAddress ?? "";
    await readyz(`${ip}:8080`);
    return performance.now() - t0;
  } finally {
    await container.remove({ force: true }).catch(() => undefined);
  }
}

/** The floor: a plain pod of the image (no Deployment, no Pulumi) to its first /readyz answer. */
async function kubernetesFloor(core: KubeClients["core"]): Promise<number> {
  const name = uniqueName("bench-floor");
  const t0 = performance.now();
  await core.createNamespacedPod({
    namespace: k8sNamespace,
    body: {
      metadata: { name, labels: { "agent-sessions.dev/bench": "floor" } },
      spec: {
        automountServiceAccountToken: false,
        enableServiceLinks: false,
        containers: [
          {
            name: "adapter",
            image,
            imagePullPolicy: "IfNotPresent",
            env: Object.entries(floorEnv).map(([n, value]) => ({ name: n, value })),
          },
        ],
      },
    },
  });
  try {
    let ip = "";
    const deadline = Date.now() + 60_000;
    while (!ip) {
      if (Date.now() > deadline) throw new Error(`floor pod ${name} got no IP`);
      ip = (await core.readNamespacedPod({ name, namespace: k8sNamespace })).status?.podIP ?? "";
      if (!ip) await new Promise((r) => setTimeout(r, 20));
    }
    await readyz(`${ip}:8080`);
    return performance.now() - t0;
  } finally {
    await core
      .deleteNamespacedPod({ name, namespace: k8sNamespace, gracePeriodSeconds: 0 })
      .catch(() => undefined);
  }
}

/** What identifies the running workload: a replaced one (not adopted by the recording) differs. */
async function workloadIdentity(container: string, session: string): Promise<string> {
  if (!kube) return (await docker.getContainer(container).inspect()).Id;
  const pods = await kube.core.listNamespacedPod({
    namespace: k8sNamespace,
    labelSelector: `${Labels.session}=${session},${Labels.namespace}=bench`,
  });
  return pods.items
    .filter((p) => !p.metadata?.deletionTimestamp)
    .map((p) => p.metadata?.uid)
    .join(",");
}

/** The workload killed outside: `docker kill`, or the session pod deleted at once (its ReplicaSet makes another). */
async function kill(container: string, session: string): Promise<void> {
  if (!kube) return void (await docker.getContainer(container).kill());
  const pods = await kube.core.listNamespacedPod({
    namespace: k8sNamespace,
    labelSelector: `${Labels.session}=${session},${Labels.namespace}=bench`,
  });
  for (const pod of pods.items)
    await kube.core.deleteNamespacedPod({
      name: pod.metadata?.name ?? "",
      namespace: k8sNamespace,
      gracePeriodSeconds: 0,
    });
}

async function lifecycle(path: Path): Promise<void> {
  const driver = drivers[path];
  const spec = {
    namespace: "bench",
    name: uniqueName(path),
    engine,
    image,
    contract: "v1alpha2" as const,
    ...(engine === "kubernetes"
      ? {
          kubernetes: { namespace: k8sNamespace },
          resources: { cpu: "250m", memoryMiB: 256, storageMiB: 64 },
        }
      : {}),
  };
  const container = workloadName(spec.namespace, spec.name);
  try {
    const s = samples[path];
    s.create.push(await timed(() => driver.provision(container, spec as never, secrets)));
    const created = await workloadIdentity(container, spec.name);
    s.createSettle.push(await timed(() => driver.settled(container)));
    if ((await workloadIdentity(container, spec.name)) !== created)
      throw new Error(`${container} was replaced by the recording up of its create instead of adopted`);
    s.stop.push(await timed(() => driver.scaleDown(container)));
    if (await driver.isRunning(container)) throw new Error(`${container} still runs after stop`);
    await driver.settled(container);
    let endpoint = "";
    s.resume.push(
      await timed(async () => {
        endpoint = (await driver.provision(container, spec as never, secrets)).endpoint;
      }),
    );
    await readyz(endpoint).catch((error: unknown) => {
      throw new Error(`${path} path, after resume: ${(error as Error).message}`);
    });
    const resumed = await workloadIdentity(container, spec.name);
    s.settle.push(await timed(() => driver.settled(container)));
    // The recording `up` adopts the workload the fast path made; it must not replace it.
    if ((await workloadIdentity(container, spec.name)) !== resumed)
      throw new Error(`${container} was replaced by the recording up instead of adopted`);
    // Killed outside (what the HarnessSession controller then heals with a provision).
    s.heal.push(
      await timed(async () => {
        await kill(container, spec.name);
        endpoint = (await driver.provision(container, spec as never, secrets)).endpoint;
        await readyz(endpoint);
      }),
    );
    await driver.settled(container);
  } finally {
    await driver.remove(container);
  }
}

try {
  for (let i = 0; i < runs; i++) {
    const order: Path[] = i % 2 === 0 ? ["full", "fast"] : ["fast", "full"];
    for (const path of order) await lifecycle(path);
    floor.push(kube ? await kubernetesFloor(kube.core) : await dockerFloor());
    process.stderr.write(`  run ${i + 1}/${runs} done\n`);
  }
  const f = (ms: number) => `${(ms / 1000).toFixed(2)} s`.padStart(8);
  const floorP50 = p50(floor);
  const what = kube ? "Kubernetes session steps" : "Docker session steps";
  const plain = kube ? "plain pod" : "plain container";
  console.log(`\n${what}, p50 of ${runs} runs (engine floor: ${plain} → /readyz ${f(floorP50)})`);
  console.log(
    `  ${"step".padEnd(16)}${"full path".padStart(10)}${"fast path".padStart(11)}   fast/full   fast/floor   (load average ${loadavg()
      .map((l) => l.toFixed(2))
      .join(" ")})`,
  );
  for (const step of steps) {
    const full = p50(samples.full[step]);
    const fast = p50(samples.fast[step]);
    const ratio = (v: number) =>
      Number.isFinite(v) && step !== "settle" && step !== "createSettle" ? v.toFixed(2) : "–";
    console.log(
      `  ${labels[step].padEnd(16)}${f(full).padStart(10)}${f(fast).padStart(11)}   ${ratio(fast / full).padStart(9)}   ${ratio(fast / floorP50).padStart(10)}`,
    );
  }
  console.log("  (settles: the background recording `up` returned; the full path has none)");
} finally {
  if (kube) await kube.core.deleteNamespace({ name: k8sNamespace }).catch(() => undefined);
  rmSync(dataDir, { recursive: true, force: true });
}
