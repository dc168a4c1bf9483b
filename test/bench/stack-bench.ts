/**
 * What a Docker session's stack operations cost, and how much of that is Pulumi.
 *
 *   node test/bench/stack-bench.ts [runs]      (default 10; the test bed must be up:
 *                                               scripts/testbed up node docker pulumi image)
 *
 * Each run takes one session through create (up), scaleDown, resume and destroy with
 * StackManager (stacks/) (real CLI, provider plugin, policy pack, file backend), and then does the same
 * container work directly with dockerode — volume, internal network with the host-isolation
 * rules, container create + start until /readyz answers, stop + remove — as the baseline.
 * Engine overhead = total − container work, paired run by run. The CLI calls of each operation
 * are timed too, to show where the overhead goes: the operation's own `pulumi up`/`destroy`
 * versus StackManager's other calls (stack ls/select, config, outputs).
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { PulumiCommand } from "@pulumi/pulumi/automation/index.js";
import Docker from "dockerode";
import { ADAPTER_PORT } from "../../contracts/adapter.ts";
import { isolateBridge, removeBridgeRules } from "../../infra/docker/provider/host-isolation.ts";
import { StackManager } from "../../stacks/index.ts";
import { applyTestbedEnv, referenceImage } from "../support/testbed.ts";
import { percentile } from "./stats.ts";

const operations = ["create", "scaleDown", "resume", "destroy"] as const;
type Operation = (typeof operations)[number];
type Sample = { total: number; container: number; mainCli: number; otherCli: number };

const runs = Number(process.argv[2] ?? 10);
if (!Number.isInteger(runs) || runs < 1)
  throw new Error(`runs must be a positive integer, got ${process.argv[2]}`);
applyTestbedEnv();
const pulumiHome = process.env.PULUMI_HOME;
if (!pulumiHome) throw new Error("no PULUMI_HOME: run scripts/testbed up node docker pulumi image");
const docker = new Docker({ socketPath: (process.env.DOCKER_HOST ?? "").replace(/^unix:\/\//, "") });
const image = referenceImage().image;

/** The CLI, with every call timed into `cliCalls`. */
const cliCalls: { command: string; ms: number }[] = [];
const cli = await PulumiCommand.get({ root: pulumiHome, skipVersionCheck: true });
const timedCli = new Proxy(cli, {
  get(target, property, receiver) {
    if (property !== "run") return Reflect.get(target, property, receiver);
    const run = Reflect.get(target, property, receiver) as (...args: unknown[]) => Promise<unknown>;
    return async (...args: unknown[]) => {
      const started = performance.now();
      try {
        return await run.apply(target, args);
      } finally {
        cliCalls.push({ command: String((args[0] as string[])[0]), ms: performance.now() - started });
      }
    };
  },
});

const dataDir = mkdtempSync(join(tmpdir(), "stack-bench-"));
const manager = await StackManager.create(
  { dataDir, pulumiHome, env: { DOCKER_HOST: process.env.DOCKER_HOST ?? "" } },
  { pulumiCommand: timedCli, log: () => undefined },
);
const secrets = { credentials: { MODEL_API_KEY: "bench" }, adapterToken: "bench-token" };

async function timed(fn: () => Promise<unknown>): Promise<number> {
  const started = performance.now();
  await fn();
  return performance.now() - started;
}

async function waitReady(ip: string): Promise<void> {
  for (const deadline = Date.now() + 60_000; Date.now() < deadline; ) {
    try {
      if ((await fetch(`http://${ip}:${ADAPTER_PORT}/readyz`, { signal: AbortSignal.timeout(1000) })).ok)
        return;
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`adapter at ${ip} not ready within 60 s`);
}

/** The container work of one session, done directly: what the provider asks of the engine. */
function directSession(name: string) {
  const labels = {
    "agent-sessions.dev/managed-by": "agent-sessions-bench",
    "agent-sessions.dev/session": name,
  };
  let network: { id: string; bridge: string } | undefined;
  let container: Docker.Container | undefined;
  const startContainer = async () => {
    container = await docker.createContainer({
      name,
      Image: image,
      User: "65532:65532",
      Env: [`ADAPTER_PORT=${ADAPTER_PORT}`, "AGENT_WORKSPACE=/workspace", "ADAPTER_TOKEN=bench-token"],
      Labels: labels,
      HostConfig: {
        ReadonlyRootfs: true,
        CapDrop: ["ALL"],
        SecurityOpt: ["no-new-privileges"],
        NetworkMode: `${name}-net`,
        Mounts: [
          { Type: "volume", Source: `${name}-workspace`, Target: "/workspace" },
          {
            Type: "tmpfs",
            Source: "",
            Target: "/tmp",
            TmpfsOptions: { SizeBytes: 64 * 1024 * 1024, Mode: 0o1777 },
          },
        ],
        Memory: 512 * 1024 * 1024,
        NanoCpus: 500_000_000,
        PidsLimit: 512,
      },
    });
    await container.start();
    const info = await container.inspect();
    await waitReady(info.NetworkSettings.Networks[`${name}-net`]?.IPAddress ?? "");
  };
  const stopContainer = async () => {
    await container?.stop({ t: 10 });
    await container?.remove({ force: true });
    container = undefined;
  };
  return {
    async create() {
      await docker.createVolume({ Name: `${name}-workspace`, Labels: labels });
      const created = await docker.createNetwork({
        Name: `${name}-net`,
        Internal: true,
        Labels: labels,
        Options: { "com.docker.network.bridge.enable_icc": "false" },
      });
      const info = await docker.getNetwork(created.id).inspect();
      network = { id: created.id, bridge: `br-${created.id.slice(0, 12)}` };
      await isolateBridge(network.bridge, info.IPAM?.Config?.[0]?.Gateway ?? "", []);
      await startContainer();
    },
    scaleDown: stopContainer,
    resume: startContainer,
    async destroy() {
      await stopContainer();
      if (network) {
        await removeBridgeRules(network.bridge);
        await docker.getNetwork(network.id).remove();
      }
      await docker.getVolume(`${name}-workspace`).remove();
    },
  };
}

/** One session through its life with StackManager; per operation: total and CLI time split. */
async function stackRun(name: string): Promise<Record<Operation, Omit<Sample, "container">>> {
  const spec = { namespace: "bench", name, engine: "docker" as const, image, contract: "v1alpha2" as const };
  const steps: Record<Operation, () => Promise<unknown>> = {
    create: () => manager.up(spec, secrets),
    scaleDown: () => manager.scaleDown("bench", name),
    resume: () => manager.resume("bench", name),
    destroy: () => manager.destroy("bench", name),
  };
  const out = {} as Record<Operation, Omit<Sample, "container">>;
  for (const op of operations) {
    cliCalls.length = 0;
    const total = await timed(steps[op]);
    const main = cliCalls.filter((c) => c.command === "up" || c.command === "destroy");
    const sum = (calls: typeof cliCalls) => calls.reduce((s, c) => s + c.ms, 0);
    out[op] = { total, mainCli: sum(main), otherCli: sum(cliCalls) - sum(main) };
  }
  return out;
}

async function directRun(name: string): Promise<Record<Operation, number>> {
  const session = directSession(name);
  const out = {} as Record<Operation, number>;
  for (const op of operations) out[op] = await timed(session[op]);
  return out;
}

/** Nearest-rank percentile. */

const samples: Record<Operation, Sample[]> = { create: [], scaleDown: [], resume: [], destroy: [] };
try {
  // One warm-up of each path (plugin caches, page cache, first image use), not counted.
  process.stderr.write("warm-up…\n");
  await stackRun(`warmup-${process.pid}`);
  await directRun(`as-bench-direct-warmup-${process.pid}`);
  for (let i = 0; i < runs; i++) {
    const stack = await stackRun(`run${i}-${process.pid}`);
    const direct = await directRun(`as-bench-direct-${i}-${process.pid}`);
    for (const op of operations) samples[op].push({ ...stack[op], container: direct[op] });
    process.stderr.write(
      `run ${i + 1}/${runs}: ${operations.map((op) => `${op} ${(stack[op].total / 1000).toFixed(2)}s`).join(", ")}\n`,
    );
  }
} finally {
  rmSync(dataDir, { recursive: true, force: true });
}

const seconds = (ms: number) => (ms / 1000).toFixed(2).padStart(7);
const columns = [
  "operation",
  "total p50",
  "p99",
  "container p50",
  "p99",
  "overhead p50",
  "p99",
  "op CLI p50",
  "other CLI p50",
];
const rows = operations.map((op) => {
  const s = samples[op];
  const pick = (f: (x: Sample) => number) => s.map(f);
  return [
    op.padEnd(9),
    seconds(
      percentile(
        pick((x) => x.total),
        50,
      ),
    ),
    seconds(
      percentile(
        pick((x) => x.total),
        99,
      ),
    ),
    seconds(
      percentile(
        pick((x) => x.container),
        50,
      ),
    ),
    seconds(
      percentile(
        pick((x) => x.container),
        99,
      ),
    ),
    seconds(
      percentile(
        pick((x) => x.total - x.container),
        50,
      ),
    ),
    seconds(
      percentile(
        pick((x) => x.total - x.container),
        99,
      ),
    ),
    seconds(
      percentile(
        pick((x) => x.mainCli),
        50,
      ),
    ),
    seconds(
      percentile(
        pick((x) => x.otherCli),
        50,
      ),
    ),
  ];
});
console.log(
  `\nDocker session stack operations, ${runs} runs (seconds; overhead = total − container work, per run)\n`,
);
console.log(columns.map((c, i) => (i === 0 ? c.padEnd(9) : c.padStart(7))).join("  "));
for (const row of rows) console.log(row.join("  "));
console.log(
  "\ncontainer work: the same volume/network/isolation/container calls made directly with dockerode;\n" +
    "op CLI: the operation's own `pulumi up`/`destroy`; other CLI: StackManager's stack ls/select/config/output calls.",
);
