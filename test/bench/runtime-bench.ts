/**
 * What each shipped runtime costs, one row per runtime and engine:
 *
 *   node test/bench/runtime-bench.ts [runs=3] [--runtimes reference,pi] [--engines docker,kubernetes]
 *                                   (the test bed must be up: scripts/testbed up, then
 *                                    eval "$(scripts/testbed env)"; Kubernetes only for that engine)
 *
 *   image       the runtime image's size as dockerd stores it (uncompressed)
 *   create→Ready  PUT of a HarnessSession until its phase is Ready (Pulumi up, the workload
 *               started, the adapter answering /readyz), through the real server and a runner
 *   first token   a streamed request through the proxy ("[fast] …": the model server sends at once)
 *               until its first delta event, per request (5 a session, the first one excluded)
 *   idle RSS    the workload's resident memory (cgroup v1 memory.stat rss of the container, read
 *               by dockerd) 5 s after the last request; on Kubernetes the pod's adapter container
 *
 * Everything is real: `serve --no-runner` and a runner (`--engine docker|kubernetes`), the test
 * bed's dockerd or cluster, the runtime's image as the test bed built it, the loopback model
 * server on our bridge. Each run creates one new session and deletes it. Nearest-rank p50; with
 * few runs the figures are a range, not a distribution.
 */
import { randomBytes } from "node:crypto";
import { type Engine, type EngineProbe, dockerProbe, kubernetesProbe } from "../support/engine-probes.ts";
import { dockerClient } from "../support/session-harness.ts";
import { startSessionModelServer, System, until } from "../support/system.ts";
import { applyTestbedEnv, builtImage, runtimeImagePart, sessionHostAddress } from "../support/testbed.ts";
import { p50 } from "./stats.ts";

const API = "agent-sessions.dev/v1alpha1";
const NS = "/v1/namespaces/default";
const SESSIONS = `${NS}/harnesssessions`;

const args = process.argv.slice(2);
const option = (name: string, fallback: string) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? (args[i + 1] ?? fallback) : fallback;
};
const runs = Number(args.find((a) => /^\d+$/.test(a)) ?? 3);
const runtimes = option("runtimes", "reference,pi").split(",");
for (const r of runtimes) runtimeImagePart(r); // an unknown one is refused before anything starts
const engines = option("engines", "docker").split(",") as Engine[];

const ms = (v: number) => `${v.toFixed(0)} ms`;
const range = (values: number[], unit: (v: number) => string) =>
  values.length === 0
    ? "-"
    : `${unit(p50(values))} (${unit(Math.min(...values))}–${unit(Math.max(...values))})`;
const mib = (bytes: number) => `${(bytes / 1024 / 1024).toFixed(0)} MiB`;

async function imageSize(image: string): Promise<number> {
  const docker = dockerClient();
  const info = await docker
    .getImage(image)
    .inspect()
    .catch(async () => {
      const stream = (await docker.pull(image)) as NodeJS.ReadableStream;
      await new Promise<void>((resolve, reject) =>
        docker.modem.followProgress(stream, (e: Error | null) => (e ? reject(e) : resolve())),
      );
      return docker.getImage(image).inspect();
    });
  return info.Size;
}

/** Resident memory of a Docker session's container, as dockerd's stats report it. */
async function dockerRss(container: string): Promise<number> {
  const stats = (await dockerClient().getContainer(container).stats({ stream: false })) as {
    memory_stats?: { stats?: { rss?: number; anon?: number } };
  };
  const rss = stats.memory_stats?.stats?.rss ?? stats.memory_stats?.stats?.anon;
  if (rss === undefined) throw new Error(`no rss in the stats of ${container}`);
  return rss;
}

/**
 * Resident memory of a workload: dockerd's stats on Docker; on Kubernetes (containerd) the adapter
 * container's own memory cgroup, read inside it (`rss` on cgroup v1, `anon` on v2).
 */
async function rssOf(engine: Engine, probe: EngineProbe, workload: string): Promise<number> {
  if (engine === "docker") return dockerRss(workload);
  const stat = await probe
    .exec(workload, ["cat", "/sys/fs/cgroup/memory/memory.stat"])
    .catch(() => probe.exec(workload, ["cat", "/sys/fs/cgroup/memory.stat"]));
  const line = stat.split("\n").find((l) => /^(rss|anon) \d+$/.test(l));
  if (!line) throw new Error(`no rss in the memory.stat of ${workload}`);
  return Number(line.split(" ")[1]);
}

async function firstToken(system: System, name: string, id: string): Promise<number> {
  const started = performance.now();
  const res = await fetch(`${system.url}${SESSIONS}/${name}/requests`, {
    method: "POST",
    headers: { authorization: `Bearer ${system.adminToken}`, "content-type": "application/json" },
    body: JSON.stringify({ id, input: "[fast] one two three four five six seven eight", stream: true }),
  });
  if (res.status !== 200 || !res.body) throw new Error(`streamed request: HTTP ${res.status}`);
  let first = Number.NaN;
  let text = "";
  for await (const piece of res.body as unknown as AsyncIterable<Uint8Array>) {
    text += Buffer.from(piece).toString("utf8");
    if (Number.isNaN(first) && text.includes("event: delta")) first = performance.now() - started;
  }
  if (!text.includes('"outcome":"succeeded"')) throw new Error(`streamed request did not succeed: ${text}`);
  return first;
}

type Row = { runtime: string; engine: Engine; ready: number[]; token: number[]; rss: number[] };

async function benchEngine(engine: Engine, rows: Row[]): Promise<void> {
  if (engine === "kubernetes") applyTestbedEnv();
  const probe: EngineProbe = engine === "docker" ? dockerProbe() : await kubernetesProbe("agent-sessions");
  const model = await startSessionModelServer(engine);
  const host = sessionHostAddress(engine);
  process.env.BENCH_MODEL_KEY = `sk-bench-${randomBytes(8).toString("hex")}`;
  const extra: Record<string, string> = {};
  for (const runtime of runtimes)
    extra[`AGENT_SESSIONS_${runtime.toUpperCase()}_IMAGE`] = builtImage(runtimeImagePart(runtime)).image;
  const system = new System(undefined, extra);
  await system.startServer();
  await system.startRunner(["--engine", engine]);
  try {
    for (const runtime of runtimes) {
      const row: Row = { runtime, engine, ready: [], token: [], rss: [] };
      rows.push(row);
      const agent = `bench-${runtime}`;
      await system.call("PUT", `${NS}/agents/${agent}`, {
        apiVersion: API,
        kind: "Agent",
        metadata: { name: agent },
        spec: {
          runtimeRef: runtime,
          credentials: [{ name: "MODEL_API_KEY", secretRef: { env: "BENCH_MODEL_KEY" } }],
          model: { baseUrl: model.url, name: "tiny" },
          egress: [{ cidr: `${host}/32`, port: model.port }],
        },
      });
      for (let run = 0; run < runs; run++) {
        const name = `bench-${runtime.slice(0, 4)}-${engine[0]}${randomBytes(2).toString("hex")}`;
        const started = performance.now();
        const created = await system.call("PUT", `${SESSIONS}/${name}`, {
          apiVersion: API,
          kind: "HarnessSession",
          metadata: { name },
          spec: { agentRef: agent, runtimeRef: runtime, desiredState: "running", idleTimeout: "10m" },
        });
        if (created.status !== 201) throw new Error(`create ${name}: ${JSON.stringify(created.body)}`);
        try {
          const ready = await until(
            `${name} Ready`,
            async () => {
              const s = (await system.call("GET", `${SESSIONS}/${name}`)).body;
              if (s.status?.phase === "Failed")
                throw new Error(`${name} failed: ${JSON.stringify(s.status)}`);
              return s.status?.phase === "Ready" ? s : undefined;
            },
            600_000,
          );
          row.ready.push(performance.now() - started);
          const workload: string = ready.status.containerName;
          for (let i = 0; i < 5; i++) {
            const t = await firstToken(system, name, `tok-${i}`);
            if (i > 0) row.token.push(t);
          }
          await new Promise((r) => setTimeout(r, 5_000));
          if (await probe.running(workload)) row.rss.push(await rssOf(engine, probe, workload));
        } finally {
          await system.call("DELETE", `${SESSIONS}/${name}`);
        }
        console.log(`${runtime} on ${engine}: run ${run + 1}/${runs} done`);
      }
    }
  } finally {
    await system.stop();
    await model.close();
  }
}

async function main(): Promise<void> {
  const rows: Row[] = [];
  for (const engine of engines) await benchEngine(engine, rows);
  const sizes = new Map<string, number>();
  for (const runtime of runtimes)
    sizes.set(runtime, await imageSize(builtImage(runtimeImagePart(runtime)).image));
  console.log(`\nruntime bench: ${runs} session(s) per runtime and engine (p50 (min–max))\n`);
  console.log("| runtime | engine | image | create→Ready | first token (streamed, via proxy) | idle RSS |");
  console.log("|---|---|---|---|---|---|");
  for (const r of rows)
    console.log(
      `| ${r.runtime} | ${r.engine} | ${mib(sizes.get(r.runtime) ?? Number.NaN)} | ${range(r.ready, ms)} | ${range(r.token, ms)} | ${range(r.rss, mib)} |`,
    );
}

await main();
