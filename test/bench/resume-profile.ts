/**
 * Where a resume from stopped goes, for one runtime on Docker (issue 37: "profile where pi's 8.1 s
 * goes"), through the HTTP API of a real system, back to back (no settling wait):
 *
 *   node test/bench/resume-profile.ts [runs=3] [--runtime pi] [--settled] [--boost off --boost 2 …]
 *     (the test bed must be up: scripts/testbed up node docker pulumi image base-image pi-image)
 *
 * One system (`serve --no-runner` and a `runner --engine docker`), the runtime's image as the test
 * bed built it, the loopback model server, one session. Each run: PATCH desiredState stopped →
 * phase Stopped, then PATCH running → phase Ready → the first answer of a request. Beside each, the
 * runner's own account of the commands the resume made it run (its `command done` log lines:
 * `stop` and `scale_down` for the stop; `provision` = the fast path's container up to its
 * adapter's first answer, `start` = the harness exec'd until its session says READY, `probe`),
 * so the server's share is what is left; and the container's own CPU time from its start to just
 * after the first answer (all its processes: adapter, agent, exec'd agent; cgroup v1 cpuacct, as the
 * test bed's dockerd has) and how long its CPU quota held it back meanwhile (cpu.stat
 * `throttled_time`): figures a loaded machine changes less than the wall times. Status is polled
 * every 20 ms. p50 is nearest-rank.
 * `--settled` waits, before the stop and before the resume, for the runner's background
 * recordings to finish (test/bench/settle.ts), as the settled mode of session-bench.ts does.
 * `--boost V` (repeatable): a system whose runner has AGENT_SESSIONS_STARTUP_CPU_BOOST=V (`off`,
 * cores), one after the other in the same run, with a p50 line of each at the end; the container
 * CPU and quota columns then show a boosted start using more than its declared 0.5 CPU. Without
 * it, the runner's default.
 * test/bench/live-bench.ts runs it (`profileResume`) for issue 37's whole table.
 */
import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { loadavg } from "node:os";
import { parseArgs } from "node:util";
import { modelAgent } from "../fixtures/agent-manifest.ts";
import { dockerClient } from "../support/session-harness.ts";
import { type Json, startSessionModelServer, System } from "../support/system.ts";
import { applyTestbedEnv, builtImage, runtimeImagePart } from "../support/testbed.ts";
import { settled } from "./settle.ts";
import { p50 } from "./stats.ts";

const NS = "/v1/namespaces/default";
const columns = ["stop", "scale_down", "provision", "start", "probe"] as const;

export type ResumeRun = {
  stop: number;
  ready: number;
  answer: number;
  commands: Record<string, number>;
  /** The container's CPU time (all its processes) from its start to just after the first answer, ms. */
  cpu: number;
  /** How long its CPU quota held it back (cgroup `throttled_time`) in that time, ms. */
  throttled: number;
};
export type ResumeProfile = { runtime: string; settled: boolean; boost?: string; rows: ResumeRun[] };

/** The runner's `command done` durations (ms) by kind, logged since `from` (a log length). */
function commandsSince(system: System, from: number): Record<string, number> {
  const took: Record<string, number> = {};
  for (const line of (system.runner?.logs.join("") ?? "").slice(from).split("\n")) {
    if (!line.includes('"command done"')) continue;
    const entry = JSON.parse(line) as { kind?: string; ms?: number };
    if (entry.kind && typeof entry.ms === "number") took[entry.kind] = (took[entry.kind] ?? 0) + entry.ms;
  }
  return took;
}

/**
 * The container's CPU time and its time held back by the quota since it started (cgroup v1, as
 * on the test bed's dockerd: cpuacct.usage and cpu.stat), ms; NaN where those files are not.
 */
function containerCpu(id: string): { cpu: number; throttled: number } {
  try {
    const usage = Number(readFileSync(`/sys/fs/cgroup/cpuacct/docker/${id}/cpuacct.usage`, "utf8"));
    const stat = readFileSync(`/sys/fs/cgroup/cpu/docker/${id}/cpu.stat`, "utf8");
    const throttled = Number(/^throttled_time (\d+)$/m.exec(stat)?.[1] ?? Number.NaN);
    return { cpu: usage / 1e6, throttled: throttled / 1e6 };
  } catch {
    return { cpu: Number.NaN, throttled: Number.NaN };
  }
}

/**
 * `runs` stops and resumes of one session of `runtime` (its image as the test bed built it), each
 * resume to its first answer; `settle`: each operation after the previous one's recording.
 */
export async function profileResume(options: {
  runs: number;
  runtime: string;
  settle?: boolean;
  /** AGENT_SESSIONS_STARTUP_CPU_BOOST of the runner; undefined: its default. */
  boost?: string;
  onRun?: (done: number) => void;
}): Promise<ResumeProfile> {
  const { runs, runtime } = options;
  const settle = options.settle === true;
  const imagePart = runtimeImagePart(runtime, "--runtime");
  applyTestbedEnv();
  const PREFIX = `rp-${randomBytes(2).toString("hex")}`;
  const system = new System(undefined, {
    BENCH_MODEL_KEY: "bench",
    [`AGENT_SESSIONS_${runtime.toUpperCase()}_IMAGE`]: builtImage(imagePart).image,
    ...(options.boost !== undefined ? { AGENT_SESSIONS_STARTUP_CPU_BOOST: options.boost } : {}),
  });
  const must = async (method: string, path: string, body?: unknown): Promise<Json> => {
    const res = await system.call(method, path, body);
    if (res.status >= 300)
      throw new Error(`${method} ${path}: HTTP ${res.status} ${JSON.stringify(res.body)}`);
    return res.body;
  };
  const reach = async (name: string, phase: string): Promise<void> => {
    const deadline = performance.now() + 180_000;
    while (performance.now() < deadline) {
      const s = await must("GET", `${NS}/harnesssessions/${name}`);
      if (s.status?.phase === phase) return;
      if (s.status?.phase === "Failed")
        throw new Error(`${name} Failed: ${JSON.stringify(s.status.conditions)}`);
      await new Promise((r) => setTimeout(r, 20));
    }
    throw new Error(`${name} did not reach ${phase}`);
  };
  const rows: ResumeRun[] = [];
  const docker = dockerClient();
  const model = await startSessionModelServer("docker");
  try {
    await system.startServer();
    await system.startRunner(["--engine", "docker"]);
    await must(
      "PUT",
      `${NS}/agents/${PREFIX}`,
      modelAgent(
        PREFIX,
        { url: model.url, port: model.port },
        { runtimeRef: runtime, secretEnv: "BENCH_MODEL_KEY" },
      ),
    );
    const name = `${PREFIX}-s`;
    const url = `${NS}/harnesssessions/${name}`;
    await must("PUT", url, {
      apiVersion: "agent-sessions.dev/v1alpha1",
      kind: "HarnessSession",
      metadata: { name },
      spec: { agentRef: PREFIX, runtimeRef: runtime, desiredState: "running", idleTimeout: "1h" },
    });
    await reach(name, "Ready");
    for (let i = 0; i < runs; i++) {
      if (settle) await settled(system);
      const mark = system.runner?.logs.join("").length ?? 0;
      let t0 = performance.now();
      await must("PATCH", url, { spec: { desiredState: "stopped" } });
      await reach(name, "Stopped");
      const stop = performance.now() - t0;
      if (settle) await settled(system);
      t0 = performance.now();
      await must("PATCH", url, { spec: { desiredState: "running" } });
      await reach(name, "Ready");
      const ready = performance.now() - t0;
      const res = await fetch(`${system.url}${url}/requests`, {
        method: "POST",
        headers: { authorization: `Bearer ${system.adminToken}`, "content-type": "application/json" },
        body: JSON.stringify({ input: "hello" }),
      });
      if (res.status !== 200) throw new Error(`request: HTTP ${res.status} ${await res.text()}`);
      await res.text();
      const answer = performance.now() - t0;
      const container: string = (await must("GET", url)).status.containerName;
      const { cpu, throttled } = containerCpu((await docker.getContainer(container).inspect()).Id);
      rows.push({ stop, ready, answer, commands: commandsSince(system, mark), cpu, throttled });
      options.onRun?.(i + 1);
    }
    await system.call("DELETE", url);
    return {
      runtime,
      settled: settle,
      ...(options.boost !== undefined ? { boost: options.boost } : {}),
      rows,
    };
  } finally {
    await system.stop().catch(() => undefined);
    await model.close();
  }
}

/** The p50 of each column of a profile. */
export function resumeP50(profile: ResumeProfile): ResumeRun {
  const { rows } = profile;
  return {
    stop: p50(rows.map((r) => r.stop)),
    ready: p50(rows.map((r) => r.ready)),
    answer: p50(rows.map((r) => r.answer)),
    commands: Object.fromEntries(columns.map((c) => [c, p50(rows.map((r) => r.commands[c] ?? 0))])),
    cpu: p50(rows.map((r) => r.cpu)),
    throttled: p50(rows.map((r) => r.throttled)),
  };
}

export function printResumeProfile(profile: ResumeProfile): void {
  const f = (ms: number) => `${(ms / 1000).toFixed(2)} s`;
  const mode = profile.settled ? "settled (each after the previous recording)" : "back to back";
  const boost = profile.boost !== undefined ? `, startup CPU boost ${profile.boost}` : "";
  console.log(
    `\n${profile.runtime} on Docker, stop then resume ${mode}${boost}, ${profile.rows.length} runs (p50 last)\n`,
  );
  console.log(
    `| run | stop → Stopped | resume → Ready | resume → first answer | ${columns.map((c) => `runner ${c}`).join(" | ")} | container CPU | held by its quota |`,
  );
  console.log(`|---|---|---|---|${columns.map(() => "---|").join("")}---|---|`);
  const line = (label: string, r: ResumeRun) =>
    console.log(
      `| ${label} | ${f(r.stop)} | ${f(r.ready)} | ${f(r.answer)} | ${columns.map((c) => f(r.commands[c] ?? 0)).join(" | ")} | ${f(r.cpu)} | ${f(r.throttled)} |`,
    );
  for (const [i, r] of profile.rows.entries()) line(String(i + 1), r);
  line("p50", resumeP50(profile));
}

if (import.meta.main) {
  const { positionals, values } = parseArgs({
    allowPositionals: true,
    options: {
      runtime: { type: "string", default: "pi" },
      settled: { type: "boolean", default: false },
      boost: { type: "string", multiple: true },
    },
  });
  const runs = Number(positionals[0] ?? 3);
  if (!Number.isInteger(runs) || runs < 1)
    throw new Error(`runs must be a positive integer, got ${positionals[0]}`);
  const runtime = values.runtime;
  const load = () =>
    loadavg()
      .map((l) => l.toFixed(2))
      .join(" ");
  const profiles: ResumeProfile[] = [];
  const loads = [load()];
  for (const boost of values.boost ?? [undefined]) {
    const profile = await profileResume({
      runs,
      runtime,
      settle: values.settled,
      ...(boost !== undefined ? { boost } : {}),
      onRun: (done) =>
        process.stderr.write(`${runtime}${boost ? ` boost ${boost}` : ""}: run ${done}/${runs} done\n`),
    });
    printResumeProfile(profile);
    profiles.push(profile);
    loads.push(load());
  }
  if (profiles.length > 1) {
    const f = (ms: number) => `${(ms / 1000).toFixed(2)} s`;
    console.log(
      `\n${runtime}, p50 of ${runs} each, in the order run (load average 1/5/15 min before each and at the end: ${loads.join(" → ")})\n`,
    );
    console.log(
      "| startup CPU boost | resume → Ready | resume → first answer | container CPU | held by its quota |",
    );
    console.log("|---|---|---|---|---|");
    for (const profile of profiles) {
      const r = resumeP50(profile);
      console.log(`| ${profile.boost} | ${f(r.ready)} | ${f(r.answer)} | ${f(r.cpu)} | ${f(r.throttled)} |`);
    }
  }
}
