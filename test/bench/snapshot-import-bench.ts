/**
 * A snapshot archive's import alone on Docker (issue 38), through the HTTP API of a real system
 * (server + runner), with no session to fill first: a synthetic archive of the workspace the
 * other snapshot benchmarks move (50 MB in 500 files of 100 KB, half random, half text, gzip as
 * an export makes it) PUT `runs` times under new names, each deleted after.
 *
 *   node test/bench/snapshot-import-bench.ts [runs=5] [--checkout DIR]
 *
 * Per run and p50: PUT → 201 (Ready) in ms and MB/s of the archive's bytes uncompressed, the CPU
 * seconds the server and runner processes spent on it (/proc), and the parts as the processes log
 * them: the server's reading and checking (the pieces sent meanwhile), then its last piece and
 * the runner's extract. `--checkout` runs another checkout's server and runner (the code before a
 * change), for an A/B in one sitting.
 */
import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { loadavg } from "node:os";
import { parseArgs } from "node:util";
import { pack } from "tar-stream";
import { SNAPSHOT_ARCHIVE_FORMAT } from "../../contracts/session-snapshot.ts";
import { adaptiveGzip } from "../../proxy/harness/adaptive-gzip.ts";
import { manifestEntry } from "../../proxy/harness/snapshot-archive.ts";
import { System } from "../support/system.ts";
import { applyTestbedEnv } from "../support/testbed.ts";
import { p50 } from "./stats.ts";

const { positionals, values } = parseArgs({
  allowPositionals: true,
  options: { checkout: { type: "string" } },
});
const runs = Number(positionals[0] ?? 5);
if (!Number.isInteger(runs) || runs < 1)
  throw new Error(`runs must be a positive integer, got ${positionals[0]}`);
applyTestbedEnv();

const FILES = 500;
const FILE_BYTES = 100_000;
const SNAPSHOTS = "/v1/namespaces/default/sessionsnapshots";

/** The archive an export of such a workspace makes: manifest.json, then volume/…, adaptive gzip. */
async function archive(): Promise<{ gz: Buffer; tarBytes: number }> {
  const tar = pack();
  const tarChunks: Buffer[] = [];
  tar.on("data", (c: unknown) => void tarChunks.push(c as Buffer));
  const tarEnded = new Promise<void>((resolve) => tar.on("end", () => resolve()));
  tar.entry({ name: "volume/", type: "directory", mode: 0o755 });
  const text = "the quick brown fox jumps over the lazy dog 0123456789\n"
    .repeat(Math.ceil(FILE_BYTES / 55))
    .slice(0, FILE_BYTES);
  for (let i = 0; i < FILES; i++) {
    if (i < 10) tar.entry({ name: `volume/data/d${i}/`, type: "directory", mode: 0o755 });
    tar.entry(
      { name: `volume/data/d${i % 10}/f${i}.bin`, mode: 0o644 },
      i % 2 === 0 ? randomBytes(FILE_BYTES) : Buffer.from(text),
    );
  }
  tar.finalize();
  await tarEnded;
  const body = Buffer.concat(tarChunks);
  const gzip = adaptiveGzip();
  const out: Buffer[] = [];
  gzip.stream.on("data", (c: Buffer) => out.push(c));
  const ended = new Promise<void>((resolve) => gzip.stream.on("end", () => resolve()));
  gzip.write(
    manifestEntry({
      format: SNAPSHOT_ARCHIVE_FORMAT,
      source: { namespace: "default", name: "bench" },
      spec: {
        sessionRef: "bench",
        agentRef: "bench",
        runtimeRef: "reference",
        resolvedImageDigest: "sha256:0000",
      },
      sizeBytes: FILES * FILE_BYTES,
      createdAt: new Date().toISOString(),
    }),
  );
  gzip.write(body);
  gzip.end();
  await ended;
  return { gz: Buffer.concat(out), tarBytes: body.length };
}

/** Kilobytes of `field` (VmRSS: now, VmHWM: the peak) in /proc/<pid>/status. */
function memoryKb(pid: number | undefined, field: "VmRSS" | "VmHWM"): number {
  if (pid === undefined) return 0;
  const line = readFileSync(`/proc/${pid}/status`, "utf8")
    .split("\n")
    .find((l) => l.startsWith(`${field}:`));
  return Number(line?.split(/\s+/)[1] ?? 0);
}

function cpuSeconds(pid: number | undefined): number {
  if (pid === undefined) return 0;
  const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]?.split(" ") ?? [];
  return (Number(fields[11]) + Number(fields[12])) / 100;
}

/** The numeric `field` of the JSON log lines of `logs` whose `msg` is `msg`. */
function logged(logs: string[] | undefined, msg: string, field: string): number[] {
  const out: number[] = [];
  for (const line of (logs ?? []).join("").split("\n")) {
    if (!line.startsWith("{")) continue;
    try {
      const parsed = JSON.parse(line) as Record<string, unknown>;
      if (parsed.msg === msg && typeof parsed[field] === "number") out.push(parsed[field] as number);
    } catch {
      // not a log line
    }
  }
  return out;
}

const system = new System(undefined, {}, values.checkout);
const load = () =>
  loadavg()
    .map((l) => l.toFixed(2))
    .join(" ");
const loadBefore = load();
try {
  const { gz, tarBytes } = await archive();
  await system.startServer();
  await system.startRunner(["--engine", "docker"]);
  const ms: number[] = [];
  const cpu = { server: [] as number[], runner: [] as number[] };
  const prefix = `ib-${randomBytes(2).toString("hex")}`;
  for (let i = 0; i < runs; i++) {
    const name = `${prefix}-${i}`;
    const pids = [system.server?.child.pid, system.runner?.child.pid];
    const before = pids.map(cpuSeconds);
    const t0 = performance.now();
    const res = await fetch(`${system.url}${SNAPSHOTS}/${name}/archive`, {
      method: "PUT",
      headers: { authorization: `Bearer ${system.adminToken}` },
      body: gz,
    });
    const text = await res.text();
    const took = performance.now() - t0;
    if (res.status !== 201) throw new Error(`PUT ${name}: HTTP ${res.status} ${text.slice(0, 500)}`);
    const after = pids.map(cpuSeconds);
    ms.push(took);
    cpu.server.push((after[0] ?? 0) - (before[0] ?? 0));
    cpu.runner.push((after[1] ?? 0) - (before[1] ?? 0));
    process.stderr.write(`import ${i + 1}/${runs}: ${took.toFixed(0)} ms\n`);
    await system.call("DELETE", `${SNAPSHOTS}/${name}`);
  }
  const mbs = (t: number) => tarBytes / 1e6 / (t / 1000);
  const stage = logged(system.server?.logs, "session snapshot imported", "stage_ms");
  const finish = logged(system.server?.logs, "session snapshot imported", "finish_ms");
  const extract = logged(system.runner?.logs, "snapshot copy done", "run_ms");
  const each = ms.map((t) => t.toFixed(0)).join(", ");
  console.log(
    `\nDocker: import of a snapshot archive (${(tarBytes / 1e6).toFixed(1)} MB in ${FILES} files, ${(gz.length / 1e6).toFixed(1)} MB gzip), ${runs} runs: ${each} ms`,
  );
  console.log("| | p50 |");
  console.log("|---|---|");
  console.log(`| PUT archive → 201 Ready | ${p50(ms).toFixed(0)} ms, ${mbs(p50(ms)).toFixed(0)} MB/s |`);
  console.log(
    `| the server reading and checking (pieces sent meanwhile) | ${stage.length ? `${p50(stage)} ms` : "not logged"} |`,
  );
  console.log(
    `| then its last piece and the runner's extract | ${finish.length ? `${p50(finish)} ms` : "not logged"} (the extract ${extract.length ? `${p50(extract)} ms` : "not logged"}) |`,
  );
  console.log(`| CPU: server, runner | ${p50(cpu.server).toFixed(2)} s, ${p50(cpu.runner).toFixed(2)} s |`);
  const mib = (pid: number | undefined, field: "VmRSS" | "VmHWM") =>
    `${(memoryKb(pid, field) / 1024).toFixed(0)} MiB`;
  const server = system.server?.child.pid;
  const runner = system.runner?.child.pid;
  console.log(
    `| memory after the runs: server, runner (RSS now / peak) | ${mib(server, "VmRSS")} / ${mib(server, "VmHWM")}, ${mib(runner, "VmRSS")} / ${mib(runner, "VmHWM")} |`,
  );
  console.log(
    `\ncommand: node test/bench/snapshot-import-bench.ts ${runs}${values.checkout ? ` --checkout ${values.checkout}` : ""}; load average ${loadBefore} at the start, ${load()} at the end`,
  );
} finally {
  await system.stop();
}
