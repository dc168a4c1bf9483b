/**
 * Docker stop and resume, today's full path (every step a `pulumi up`) beside the fast path
 * (runner/docker.ts: the engine at once, the stack recorded in the background), and both beside
 * the engine floor: a plain container of the same image to its adapter's first HTTP answer.
 *
 *   node test/bench/docker-fast-path-bench.ts [runs]   (default 3; the test bed must be up:
 *                                                     scripts/testbed up node docker pulumi image)
 *
 * Everything is real: runner/docker.ts's DockerDriver over stacks/StackManager (Pulumi CLI, our
 * provider plugin, the policy pack, a file backend on a temp dir), the test bed's dockerd, the
 * reference image. Per run and path one new session goes: create → Ready (provision: the adapter
 * answered /readyz), stop (scaleDown returned; the container is gone), resume → Ready (provision
 * again), settle (the background recording `up` of the resume finished; 0 on the full path),
 * then destroy. The paths alternate which goes first run by run. p50 is nearest-rank.
 */
import { rmSync } from "node:fs";
import { workloadName } from "../../contracts/session-spec.ts";
import { DockerDriver } from "../../runner/docker.ts";
import { dockerClient, stackManagerFor, tempDir, uniqueName } from "../support/session-harness.ts";
import { applyTestbedEnv, referenceImage } from "../support/testbed.ts";

const runs = Number(process.argv[2] ?? 3);
if (!Number.isInteger(runs) || runs < 1)
  throw new Error(`runs must be a positive integer, got ${process.argv[2]}`);
applyTestbedEnv();
const image = referenceImage().image;
const docker = dockerClient();
const dataDir = tempDir("fast-path-bench");
const { manager } = await stackManagerFor(dataDir);
const secrets = { credentials: { MODEL_API_KEY: "bench" }, adapterToken: "bench-token-0123456789" };
const drivers = {
  full: new DockerDriver(docker, manager, { fastPath: false }),
  fast: new DockerDriver(docker, manager, { fastPath: true }),
};
type Path = keyof typeof drivers;
const steps = ["create", "stop", "resume", "settle"] as const;
const samples: Record<Path, Record<(typeof steps)[number], number[]>> = {
  full: { create: [], stop: [], resume: [], settle: [] },
  fast: { create: [], stop: [], resume: [], settle: [] },
};
const floor: number[] = [];

function p50(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.max(0, Math.ceil(0.5 * sorted.length) - 1)] ?? Number.NaN;
}

async function timed(fn: () => Promise<unknown>): Promise<number> {
  const t0 = performance.now();
  await fn();
  return performance.now() - t0;
}

async function readyz(address: string, timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      if ((await fetch(`http://${address}/readyz`, { signal: AbortSignal.timeout(1000) })).ok) return;
    } catch {
      // not yet
    }
    if (Date.now() > deadline) throw new Error(`no /readyz at ${address}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** The floor: a plain container of the image (default bridge, no Pulumi) to its first /readyz answer. */
async function floorRun(): Promise<number> {
  const t0 = performance.now();
  const container = await docker.createContainer({
    name: uniqueName("bench-floor"),
    Image: image,
    Env: ["ADAPTER_PORT=8080", "AGENT_WORKSPACE=/tmp", "ADAPTER_TOKEN=floor"],
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

async function lifecycle(path: Path): Promise<void> {
  const driver = drivers[path];
  const spec = {
    namespace: "bench",
    name: uniqueName(path),
    engine: "docker" as const,
    image,
    contract: "v1alpha2" as const,
  };
  const container = workloadName(spec.namespace, spec.name);
  try {
    const s = samples[path];
    s.create.push(await timed(() => driver.provision(container, spec as never, secrets)));
    await driver.settled(container);
    s.stop.push(await timed(() => driver.scaleDown(container)));
    if (await driver.isRunning(container)) throw new Error(`${container} still runs after stop`);
    await driver.settled(container);
    let endpoint = "";
    s.resume.push(
      await timed(async () => {
        endpoint = (await driver.provision(container, spec as never, secrets)).endpoint;
      }),
    );
    await readyz(endpoint);
    const resumed = (await docker.getContainer(container).inspect()).Id;
    s.settle.push(await timed(() => driver.settled(container)));
    // The recording `up` adopts the container the fast path made; it must not replace it.
    if ((await docker.getContainer(container).inspect()).Id !== resumed)
      throw new Error(`${container} was replaced by the recording up instead of adopted`);
  } finally {
    await driver.remove(container);
  }
}

try {
  for (let i = 0; i < runs; i++) {
    const order: Path[] = i % 2 === 0 ? ["full", "fast"] : ["fast", "full"];
    for (const path of order) await lifecycle(path);
    floor.push(await floorRun());
    process.stderr.write(`  run ${i + 1}/${runs} done\n`);
  }
  const f = (ms: number) => `${(ms / 1000).toFixed(2)} s`.padStart(8);
  const floorP50 = p50(floor);
  console.log(
    `\nDocker session steps, p50 of ${runs} runs (engine floor: plain container → /readyz ${f(floorP50)})`,
  );
  console.log(
    `  ${"step".padEnd(16)}${"full path".padStart(10)}${"fast path".padStart(11)}   fast/full   fast/floor`,
  );
  for (const step of steps) {
    const full = p50(samples.full[step]);
    const fast = p50(samples.fast[step]);
    const ratio = (v: number) => (Number.isFinite(v) && step !== "settle" ? v.toFixed(2) : "–");
    console.log(
      `  ${step.padEnd(16)}${f(full).padStart(10)}${f(fast).padStart(11)}   ${ratio(fast / full).padStart(9)}   ${ratio(fast / floorP50).padStart(10)}`,
    );
  }
  console.log("  (settle: the background recording `up` after resume returned; the full path has none)");
} finally {
  rmSync(dataDir, { recursive: true, force: true });
}
