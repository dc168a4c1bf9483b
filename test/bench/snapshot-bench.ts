/**
 * Snapshots, fork, restore and archives (issue 38) as a client sees them, through the HTTP API of
 * a real system, beside baselines measured in the same run.
 *
 *   node test/bench/snapshot-bench.ts [runs=5] [--engine docker|kubernetes] [--files 500] [--mb 50]
 *     [--checkout DIR]  (the server and runner of another checkout: the code before a change)
 *     (the test bed must be up: scripts/testbed up)
 *
 * One system (`serve --no-runner` and a `runner --engine E`), the reference runtime and the
 * loopback model. One session's workspace holds `--mb` MB in `--files` files (half random bytes,
 * half text, as a workspace mixes binaries and sources), written through the files API. Each run,
 * back to back (no settling wait):
 *   snapshot  POST …:snapshot → its 201 (the snapshot Ready)
 *   fork      PUT a session with spec.source → phase Ready
 *   restore   POST …:restore → phase Ready again
 *   export    GET …/archive → its last byte (MB/s of the snapshot's size)
 *   import    PUT …/archive → its 201 (the imported snapshot Ready)
 * Baselines, same run: a new session with an empty volume → Ready (what a fork adds to it), a
 * stop → resume of the session (what a restore adds to it), and the files API's own archive of
 * the same workspace (`GET …/workspace:archive`, the export path without the snapshot). On
 * Docker also the engine floor: the runner's own engine read of the same snapshot
 * (DockerSnapshots.read) and write of that tar into a new storage (DockerSnapshots.write, this
 * checkout's, with `--checkout` too), called
 * from here with no server, runner link or gzip: what export + import can reach at best. Beside
 * each export and import, the CPU seconds the server and the runner processes spent on it (from
 * /proc: a figure the machine's other load does not inflate as it does wall time). Last, the parts
 * of a restore and an import as the server and runner time them in their logs.
 * Status is polled every 20 ms. p50 is nearest-rank.
 */
import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { modelAgent } from "../fixtures/agent-manifest.ts";
import type { ModelServer } from "../fixtures/model-server.ts";
import { type Json, startSessionModelServer, System } from "../support/system.ts";
import { applyTestbedEnv } from "../support/testbed.ts";
import { p50 } from "./stats.ts";
import { snapshotStorageName } from "../../contracts/session-snapshot.ts";
import { DockerSnapshots } from "../../runner/docker/snapshots.ts";
import { dockerClient } from "../support/session-harness.ts";
import { builtImage } from "../support/testbed.ts";

const { positionals, values } = parseArgs({
  allowPositionals: true,
  options: {
    engine: { type: "string", default: "docker" },
    files: { type: "string", default: "500" },
    mb: { type: "string", default: "50" },
    /** Run the server and runner of another checkout (e.g. /work/main: the code before a change). */
    checkout: { type: "string" },
  },
});
const runs = Number(positionals[0] ?? 5);
const engine = values.engine;
const fileCount = Number(values.files);
const totalBytes = Number(values.mb) * 1_000_000;
if (!Number.isInteger(runs) || runs < 1)
  throw new Error(`runs must be a positive integer, got ${positionals[0]}`);
if (engine !== "docker" && engine !== "kubernetes")
  throw new Error(`--engine docker|kubernetes, got ${engine}`);
if (!Number.isInteger(fileCount) || fileCount < 1) throw new Error(`--files must be a positive integer`);
applyTestbedEnv();

const API = "agent-sessions.dev/v1alpha1";
const NS = "/v1/namespaces/default";
const SESSIONS = `${NS}/harnesssessions`;
const SNAPSHOTS = `${NS}/sessionsnapshots`;
const PREFIX = `sb-${randomBytes(2).toString("hex")}`;
const POLL_MS = 20;
const TIMEOUT_MS = 300_000;

const system = new System(undefined, { BENCH_MODEL_KEY: "bench" }, values.checkout);
let model: ModelServer | undefined;
const samples = {
  snapshot: [] as number[],
  fork: [] as number[],
  restore: [] as number[],
  exportMBs: [] as number[],
  importMBs: [] as number[],
  bothMBs: [] as number[],
  emptyCreate: [] as number[],
  stopResume: [] as number[],
  filesArchiveMBs: [] as number[],
  floorMBs: [] as number[],
  floorReadMBs: [] as number[],
  floorWriteMBs: [] as number[],
  exportCpu: [] as { server: number; runner: number }[],
  importCpu: [] as { server: number; runner: number }[],
};

/** CPU seconds (user + system) process `pid` has spent (Linux /proc; fields 14 and 15, 100 Hz). */
function cpuSeconds(pid: number | undefined): number {
  if (pid === undefined) return 0;
  const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]?.split(" ") ?? [];
  return (Number(fields[11]) + Number(fields[12])) / 100;
}
const cpuNow = () => ({
  server: cpuSeconds(system.server?.child.pid),
  runner: cpuSeconds(system.runner?.child.pid),
});
const cpuSince = (before: { server: number; runner: number }) => {
  const now = cpuNow();
  return { server: now.server - before.server, runner: now.runner - before.runner };
};

/** Docker: the snapshot's storage read and written again by the engine path the runner uses, here. */
async function engineFloor(snap: string, i: number): Promise<void> {
  const snapshots = new DockerSnapshots(dockerClient(), builtImage("base-image").image);
  const target = (name: string) => ({
    storage: snapshotStorageName("default", name),
    namespace: "default",
    name,
  });
  let t0 = performance.now();
  const chunks: Buffer[] = [];
  for await (const chunk of await snapshots.read(target(snap), 1024 * 1024 * 1024)) chunks.push(chunk);
  const tar = Buffer.concat(chunks);
  const readMs = performance.now() - t0;
  const copy = target(`${PREFIX}-floor${i}`);
  t0 = performance.now();
  await snapshots.write(copy, {
    size: tar.length,
    open: async function* () {
      for (let o = 0; o < tar.length; o += 1024 * 1024) yield tar.subarray(o, o + 1024 * 1024);
    },
  });
  const writeMs = performance.now() - t0;
  await snapshots.remove(copy);
  samples.floorReadMBs.push(mbs(sizeBytes, readMs));
  samples.floorWriteMBs.push(mbs(sizeBytes, writeMs));
  samples.floorMBs.push(mbs(sizeBytes, readMs + writeMs));
}
let sizeBytes = 0;

/** The JSON lines of `logs` whose `msg` is `msg` (and whose fields match `where`). */
function logLines(logs: string[] | undefined, msg: string, where: Record<string, unknown> = {}) {
  const out: Record<string, unknown>[] = [];
  for (const line of (logs ?? []).join("").split("\n")) {
    if (!line.includes(msg)) continue;
    try {
      const o = JSON.parse(line) as Record<string, unknown>;
      if (o.msg === msg && Object.entries(where).every(([k, v]) => o[k] === v)) out.push(o);
    } catch {
      // not a log line
    }
  }
  return out;
}

/**
 * The parts of a restore and an import, p50 over the runs, from the processes' own logs (what
 * they time themselves; a checkout that does not log them shows none): the server's restore
 * timings (stop, volume, back up), its import's staging and sending, the runner's copies.
 */
function logParts(): string | undefined {
  const server = system.server?.logs;
  const runner = system.runner?.logs;
  const p50Of = (lines: Record<string, unknown>[], field: string) => {
    const v = lines.map((l) => Number(l[field])).filter((x) => Number.isFinite(x));
    return v.length === 0 ? "–" : `${Math.round(p50(v))} ms`;
  };
  const restore = logLines(server, "restore timings");
  // Docker's copy container ("snapshot copy done": start_ms, run_ms), else Kubernetes' copy pod
  // ("snapshot copy pod done": start_ms, work_ms from its start to its deletion) and the restore's
  // own timings (the session's last pod gone after pods_gone_ms).
  const restoreCopy = [
    ...logLines(runner, "snapshot copy done", { what: "restore" }),
    ...logLines(runner, "snapshot copy pod done", { what: "restore" }).map((l) => ({
      ...l,
      run_ms: l.work_ms,
    })),
  ];
  const restoreRunner = logLines(runner, "snapshot restore timings");
  const imported = logLines(server, "session snapshot imported");
  const importCopy = logLines(runner, "snapshot copy done", { what: "import" });
  if (restore.length + imported.length === 0) return undefined;
  return [
    "Parts, p50 from the processes' logs:",
    `- restore: stop ${p50Of(restore, "stop_ms")}, volume ${p50Of(restore, "volume_ms")} (the runner's copy container started in ${p50Of(restoreCopy, "start_ms")}, ran ${p50Of(restoreCopy, "run_ms")}${restoreRunner.length > 0 ? `; the session's last pod gone after ${p50Of(restoreRunner, "pods_gone_ms")} of the runner's ${p50Of(restoreRunner, "ms")}, the copy pod started ahead in ${restoreRunner.filter((l) => l.started_ahead === true).length} of ${restoreRunner.length}` : ""}), back up ${p50Of(restore, "back_ms")}`,
    `- import: the server reading and checking the archive (the pieces sent to the runner meanwhile) ${p50Of(imported, "stage_ms")}, then its last piece and the runner's extract ${p50Of(imported, "finish_ms")} (the extract ${p50Of(importCopy, "run_ms")})`,
  ].join("\n");
}

async function must(method: string, path: string, body?: unknown): Promise<Json> {
  const res = await system.call(method, path, body);
  if (res.status >= 300) throw new Error(`${method} ${path}: HTTP ${res.status} ${JSON.stringify(res.body)}`);
  return res.body;
}

async function bytes(method: string, path: string, body?: Uint8Array): Promise<Buffer> {
  const res = await fetch(`${system.url}${path}`, {
    method,
    headers: { authorization: `Bearer ${system.adminToken}` },
    ...(body ? { body } : {}),
  });
  const out = Buffer.from(await res.arrayBuffer());
  if (res.status >= 300)
    throw new Error(`${method} ${path}: HTTP ${res.status} ${out.toString().slice(0, 500)}`);
  return out;
}

async function reach(name: string, phase: string, since: number): Promise<number> {
  const deadline = since + TIMEOUT_MS;
  while (performance.now() < deadline) {
    const s = await must("GET", `${SESSIONS}/${name}`);
    if (s.status?.phase === phase && s.status.observedGeneration === s.metadata.generation)
      return performance.now() - since;
    if (s.status?.phase === "Failed")
      throw new Error(`${name} Failed: ${JSON.stringify(s.status.conditions)}`);
    await new Promise((r) => setTimeout(r, POLL_MS));
  }
  throw new Error(`${name} did not reach ${phase} in ${TIMEOUT_MS} ms`);
}

function manifest(name: string, extra: Record<string, unknown> = {}) {
  return {
    apiVersion: API,
    kind: "HarnessSession",
    metadata: { name },
    spec: { agentRef: PREFIX, runtimeRef: "reference", desiredState: "running", idleTimeout: "1h", ...extra },
  };
}

/** `--mb` MB in `--files` files under data/, half random, half text. */
async function fill(name: string): Promise<void> {
  const each = Math.floor(totalBytes / fileCount);
  const text = "the quick brown fox jumps over the lazy dog 0123456789\n"
    .repeat(Math.ceil(each / 55))
    .slice(0, each);
  for (let i = 0; i < fileCount; i++) {
    const body = i % 2 === 0 ? randomBytes(each) : Buffer.from(text);
    await bytes("PUT", `${SESSIONS}/${name}/workspace/files/data/d${i % 10}/f${i}.bin`, body);
  }
}

const mbs = (n: number, ms: number) => n / 1e6 / (ms / 1000);

async function run(i: number, source: string): Promise<void> {
  const snap = `${PREFIX}-s${i}`;
  let t0 = performance.now();
  const taken = await must("POST", `${SESSIONS}/${source}:snapshot`, { name: snap });
  samples.snapshot.push(performance.now() - t0);
  sizeBytes = taken.status.sizeBytes;

  const fork = `${PREFIX}-f${i}`;
  t0 = performance.now();
  await must("PUT", `${SESSIONS}/${fork}`, manifest(fork, { source: { snapshotRef: snap } }));
  samples.fork.push(await reach(fork, "Ready", t0));

  t0 = performance.now();
  await must("POST", `${SESSIONS}/${source}:restore`, { snapshot: snap });
  samples.restore.push(await reach(source, "Ready", t0));

  let cpu = cpuNow();
  t0 = performance.now();
  const archive = await bytes("GET", `${SNAPSHOTS}/${snap}/archive`);
  const exportMs = performance.now() - t0;
  samples.exportCpu.push(cpuSince(cpu));
  cpu = cpuNow();
  t0 = performance.now();
  await bytes("PUT", `${SNAPSHOTS}/${PREFIX}-i${i}/archive`, archive);
  const importMs = performance.now() - t0;
  samples.importCpu.push(cpuSince(cpu));
  if (engine === "docker") await engineFloor(snap, i);
  samples.exportMBs.push(mbs(sizeBytes, exportMs));
  samples.importMBs.push(mbs(sizeBytes, importMs));
  samples.bothMBs.push(mbs(sizeBytes, exportMs + importMs));

  // Baselines.
  const empty = `${PREFIX}-e${i}`;
  t0 = performance.now();
  await must("PUT", `${SESSIONS}/${empty}`, manifest(empty));
  samples.emptyCreate.push(await reach(empty, "Ready", t0));
  t0 = performance.now();
  await must("PATCH", `${SESSIONS}/${source}`, { spec: { desiredState: "stopped" } });
  await reach(source, "Stopped", t0);
  await must("PATCH", `${SESSIONS}/${source}`, { spec: { desiredState: "running" } });
  samples.stopResume.push(await reach(source, "Ready", t0));
  t0 = performance.now();
  const files = await bytes("GET", `${SESSIONS}/${source}/workspace:archive?path=`);
  samples.filesArchiveMBs.push(mbs(files.length, performance.now() - t0));

  await Promise.all([
    system.call("DELETE", `${SESSIONS}/${fork}`),
    system.call("DELETE", `${SESSIONS}/${empty}`),
    system.call("DELETE", `${SNAPSHOTS}/${PREFIX}-i${i}`),
  ]);
  await system.call("DELETE", `${SNAPSHOTS}/${snap}`);
}

try {
  model = await startSessionModelServer(engine);
  await system.startServer();
  await system.startRunner(["--engine", engine]);
  await must(
    "PUT",
    `${NS}/agents/${PREFIX}`,
    modelAgent(
      PREFIX,
      { url: model.url, port: model.port, host: model.host },
      { secretEnv: "BENCH_MODEL_KEY" },
    ),
  );
  const source = `${PREFIX}-src`;
  await must("PUT", `${SESSIONS}/${source}`, manifest(source));
  await reach(source, "Ready", performance.now());
  const t0 = performance.now();
  await fill(source);
  process.stderr.write(
    `filled ${fileCount} files, ${totalBytes / 1e6} MB in ${((performance.now() - t0) / 1000).toFixed(1)} s\n`,
  );
  for (let i = 0; i < runs; i++) {
    await run(i, source);
    process.stderr.write(`run ${i + 1}/${runs} done\n`);
  }
  await system.call("DELETE", `${SESSIONS}/${source}`);
  const s = (ms: number) => `${(ms / 1000).toFixed(2)} s`;
  const r = (v: number) => `${v.toFixed(0)} MB/s`;
  console.log(
    `\n${engine === "docker" ? "Docker" : "Kubernetes"}: snapshots through the HTTP API, p50 of ${runs} runs, back to back; workspace ${fileCount} files, ${(sizeBytes / 1e6).toFixed(1)} MB as the snapshot counts it`,
  );
  console.log("| step | measured | baseline (same run) |");
  console.log("|---|---|---|");
  console.log(`| snapshot (request → Ready) | ${s(p50(samples.snapshot))} | |`);
  console.log(
    `| fork (create → Ready) | ${s(p50(samples.fork))} | a new empty session → Ready: ${s(p50(samples.emptyCreate))} |`,
  );
  console.log(
    `| restore in place (request → Ready) | ${s(p50(samples.restore))} | stop → resume: ${s(p50(samples.stopResume))} |`,
  );
  console.log(
    `| export (GET archive) | ${r(p50(samples.exportMBs))} | files API archive of the workspace: ${r(p50(samples.filesArchiveMBs))} |`,
  );
  const floor = engine === "docker";
  console.log(
    `| import (PUT archive → Ready) | ${r(p50(samples.importMBs))} | ${floor ? `engine floor, write of the tar alone: ${r(p50(samples.floorWriteMBs))}` : ""} |`,
  );
  console.log(
    `| export + import | ${r(p50(samples.bothMBs))} | ${floor ? `engine floor, read + write alone (no server, link or gzip): ${r(p50(samples.floorMBs))}; read alone ${r(p50(samples.floorReadMBs))}` : ""} |`,
  );
  const cpuOf = (v: { server: number; runner: number }[]) =>
    `server ${p50(v.map((c) => c.server)).toFixed(2)} s, runner ${p50(v.map((c) => c.runner)).toFixed(2)} s`;
  console.log(`| CPU of an export (p50) | ${cpuOf(samples.exportCpu)} | |`);
  console.log(`| CPU of an import (p50) | ${cpuOf(samples.importCpu)} | |`);
  const parts = logParts();
  if (parts) console.log(`\n${parts}`);
  console.log(
    `\ncommand: node test/bench/snapshot-bench.ts ${runs} --engine ${engine} --files ${fileCount} --mb ${totalBytes / 1e6}${values.checkout ? ` --checkout ${values.checkout}` : ""}`,
  );
} finally {
  await system.stop().catch(() => undefined);
  await model?.close();
}
