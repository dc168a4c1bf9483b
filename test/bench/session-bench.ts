/**
 * A HarnessSession's lifecycle as a client sees it, through the HTTP API of a real system, with
 * the runner's fast path off (every step a `pulumi up`, the path before it) beside the fast path
 * on, in the same run, and both beside the engine floor: a plain container of the same image (on
 * either engine) to its adapter's first HTTP answer.
 *
 *   node test/bench/session-bench.ts [runs=3] [--engine docker|kubernetes] [--back-to-back]
 *     (the test bed must be up: scripts/testbed up node docker pulumi image,
 *      and pulumi-kubernetes kubernetes for --engine kubernetes)
 *
 * Two systems run side by side, each `serve --no-runner` and a `runner --engine …` process, the
 * same reference image and loopback model server: `full` (the runner with
 * AGENT_SESSIONS_FAST_PATH=off) and `fast` (the default). Per run and system one new session goes
 * through, the systems alternating which goes first:
 *   create   PUT HarnessSession → phase Ready
 *   stop     PATCH desiredState stopped → phase Stopped
 *   resume   PATCH desiredState running → phase Ready
 *   heal     the workload killed outside (docker kill / the pod deleted) → Ready again by itself
 *            (restartCount one higher); from the kill, which the engine reports at once (a
 *            first restart has no back-off; each run's session is new, so it is a first one).
 *   idle     idleTimeout 3s, one request answered → phase Stopped; what is shown is the time past
 *            the idle timeout (from the reply's end).
 * Each step starts once the previous one settled (the fast path's background recording `up`
 * finished: no `*.recording` marker left in the runner's stack settings, stacks/recording.ts), so
 * a step is measured on its own; how long the recordings took is shown apart.
 *
 * `--back-to-back` adds, per run, one more session on the fast system driven as a user does, with
 * no settling wait: create → stop → resume → stop → resume, each PATCH sent as soon as the
 * previous step reached its phase (so every stop and resume comes right after another operation
 * whose recording is still running). A second table shows stop and resume → Ready in both modes,
 * settled (the steps above) and back to back, beside the same floor. Status is polled
 * every 25 ms (so each figure is up to 25 ms late). p50 is nearest-rank. The processes' logs are
 * written to session-bench-<path>.log in the temp dir at the end. test/bench/live-bench.ts runs it
 * (`benchSessions`) for issue 37's whole table.
 */
import { randomBytes } from "node:crypto";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { modelAgent } from "../fixtures/agent-manifest.ts";
import type { ModelServer } from "../fixtures/model-server.ts";
import { dockerProbe, type EngineProbe, kubernetesProbe } from "../support/engine-probes.ts";
import { dockerClient, uniqueName } from "../support/session-harness.ts";
import { type Json, startSessionModelServer, System } from "../support/system.ts";
import { applyTestbedEnv, referenceImage } from "../support/testbed.ts";
import { settled as settledFor } from "./settle.ts";
import { p50 } from "./stats.ts";

const API = "agent-sessions.dev/v1alpha1";
const NS = "/v1/namespaces/default";
const IDLE_S = 3;
const POLL_MS = 25;
const TIMEOUT_MS = 300_000;
const steps = ["create", "stop", "resume", "heal", "idle", "settle"] as const;
type Step = (typeof steps)[number];
type Path = "full" | "fast";
export type SessionEngine = "docker" | "kubernetes";

export type SessionBench = {
  engine: SessionEngine;
  runs: number;
  /** Per path and step, ms (settle: the time spent waiting for recordings, a run's total). */
  samples: Record<Path, Record<Step, number[]>>;
  /** The engine floor: a plain container of the reference image → its first /readyz answer, ms. */
  floor: number[];
  /** Stops and resumes of the back-to-back sessions (two each a run); empty without backToBack. */
  backToBack: { stop: number[]; resume: number[] };
};

/**
 * `runs` lifecycles on `engine` with the fast path off and on, settled, beside the engine floor;
 * `backToBack`: one more session a run stopped and resumed twice with no settling wait.
 */
export async function benchSessions(options: {
  runs: number;
  engine: SessionEngine;
  backToBack?: boolean;
  onRun?: (done: number) => void;
}): Promise<SessionBench> {
  const { runs, engine } = options;
  const backToBack = options.backToBack === true;
  applyTestbedEnv();
  const PREFIX = `sb-${randomBytes(2).toString("hex")}`;
  const runnerArgs = ["--engine", engine];
  const systems: Record<Path, System> = {
    full: new System(undefined, { AGENT_SESSIONS_FAST_PATH: "off", BENCH_MODEL_KEY: "bench" }),
    fast: new System(undefined, { BENCH_MODEL_KEY: "bench" }),
  };
  const result: SessionBench = {
    engine,
    runs,
    samples: {
      full: { create: [], stop: [], resume: [], heal: [], idle: [], settle: [] },
      fast: { create: [], stop: [], resume: [], heal: [], idle: [], settle: [] },
    },
    floor: [],
    backToBack: { stop: [], resume: [] },
  };
  const { samples, floor } = result;
  const b2b = result.backToBack;
  let model: ModelServer | undefined;
  let probe: EngineProbe;

  const must = async (system: System, method: string, path: string, body?: unknown): Promise<Json> => {
    const res = await system.call(method, path, body);
    if (res.status >= 300)
      throw new Error(`${method} ${path}: HTTP ${res.status} ${JSON.stringify(res.body)}`);
    return res.body;
  };

  /** Polls until `ok(session)`; ms since `since`. A Failed session ends the bench. */
  const reach = async (
    system: System,
    name: string,
    ok: (s: Json) => boolean,
    since: number,
  ): Promise<Json> => {
    const deadline = since + TIMEOUT_MS;
    while (performance.now() < deadline) {
      const s = await must(system, "GET", `${NS}/harnesssessions/${name}`);
      if (ok(s)) return { ms: performance.now() - since, session: s };
      if (s.status?.phase === "Failed")
        throw new Error(`${name} Failed: ${JSON.stringify(s.status.conditions)}`);
      await new Promise((r) => setTimeout(r, POLL_MS));
    }
    throw new Error(`${name} did not get there in ${TIMEOUT_MS} ms`);
  };
  const phase = (p: string) => (s: Json) => s.status?.phase === p;
  const settled = (system: System) => settledFor(system, TIMEOUT_MS, POLL_MS);

  const lifecycle = async (path: Path): Promise<void> => {
    const system = systems[path];
    const s = samples[path];
    const name = uniqueName(`${PREFIX}-${path}`).slice(0, 40);
    const url = `${NS}/harnesssessions/${name}`;
    let t0 = performance.now();
    await must(system, "PUT", url, {
      apiVersion: API,
      kind: "HarnessSession",
      metadata: { name },
      spec: { agentRef: PREFIX, runtimeRef: "reference", desiredState: "running", idleTimeout: "1h" },
    });
    const ready = await reach(system, name, phase("Ready"), t0);
    s.create.push(ready.ms);
    const container: string = ready.session.status.containerName;
    let settling = 0;
    try {
      settling += await settled(system);
      t0 = performance.now();
      await must(system, "PATCH", url, { spec: { desiredState: "stopped" } });
      s.stop.push((await reach(system, name, phase("Stopped"), t0)).ms);
      settling += await settled(system);
      t0 = performance.now();
      await must(system, "PATCH", url, { spec: { desiredState: "running" } });
      const resumed = await reach(system, name, phase("Ready"), t0);
      s.resume.push(resumed.ms);
      const restarts: number = resumed.session.status.restartCount ?? 0;
      settling += await settled(system);
      t0 = performance.now();
      await probe.kill(container);
      const healed = (x: Json) => x.status?.phase === "Ready" && (x.status.restartCount ?? 0) > restarts;
      s.heal.push((await reach(system, name, healed, t0)).ms);
      settling += await settled(system);
      await must(system, "PATCH", url, { spec: { idleTimeout: `${IDLE_S}s` } });
      const asked = await system.call("POST", `${url}/requests`, { input: "hello" });
      if (asked.status !== 200)
        throw new Error(`request: HTTP ${asked.status} ${JSON.stringify(asked.body)}`);
      t0 = performance.now();
      s.idle.push((await reach(system, name, phase("Stopped"), t0)).ms - IDLE_S * 1000);
      settling += await settled(system);
      s.settle.push(settling);
    } finally {
      await system.call("DELETE", url);
    }
  };

  /** A session of the fast system stopped and resumed twice with no wait for recordings. */
  const backToBackLifecycle = async (): Promise<void> => {
    const system = systems.fast;
    const name = uniqueName(`${PREFIX}-b2b`).slice(0, 40);
    const url = `${NS}/harnesssessions/${name}`;
    const t = performance.now();
    await must(system, "PUT", url, {
      apiVersion: API,
      kind: "HarnessSession",
      metadata: { name },
      spec: { agentRef: PREFIX, runtimeRef: "reference", desiredState: "running", idleTimeout: "1h" },
    });
    await reach(system, name, phase("Ready"), t);
    try {
      for (let i = 0; i < 2; i++) {
        let t0 = performance.now();
        await must(system, "PATCH", url, { spec: { desiredState: "stopped" } });
        b2b.stop.push((await reach(system, name, phase("Stopped"), t0)).ms);
        t0 = performance.now();
        await must(system, "PATCH", url, { spec: { desiredState: "running" } });
        b2b.resume.push((await reach(system, name, phase("Ready"), t0)).ms);
      }
    } finally {
      await system.call("DELETE", url);
      await settled(system);
    }
  };

  /** The floor: a plain container of the image, no Pulumi, to its first /readyz answer. */
  const engineFloor = async (): Promise<number> => {
    const image = referenceImage().image;
    const env = { ADAPTER_PORT: "8080", AGENT_WORKSPACE: "/tmp", ADAPTER_TOKEN: "floor" };
    const docker = dockerClient();
    const t0 = performance.now();
    const container = await docker.createContainer({
      name: uniqueName("bench-floor"),
      Image: image,
      Env: Object.entries(env).map(([k, v]) => `${k}=${v}`),
      Labels: { "agent-sessions.dev/bench": "floor" },
    });
    try {
      await container.start();
      const ip = Object.values((await container.inspect()).NetworkSettings.Networks)[0]?.IPAddress ?? "";
      for (;;) {
        const ok = await fetch(`http://${ip}:8080/readyz`, { signal: AbortSignal.timeout(1000) }).then(
          (r) => r.ok,
          () => false,
        );
        if (ok) return performance.now() - t0;
        if (performance.now() - t0 > 60_000) throw new Error("floor container never ready");
        await new Promise((r) => setTimeout(r, 10));
      }
    } finally {
      await container.remove({ force: true }).catch(() => undefined);
    }
  };

  try {
    model = await startSessionModelServer(engine);
    probe = engine === "docker" ? dockerProbe() : await kubernetesProbe("agent-sessions");
    for (const system of Object.values(systems)) {
      await system.startServer();
      await system.startRunner(runnerArgs);
      await must(
        system,
        "PUT",
        `${NS}/agents/${PREFIX}`,
        modelAgent(PREFIX, { url: model.url, port: model.port }, { secretEnv: "BENCH_MODEL_KEY" }),
      );
    }
    for (let i = 0; i < runs; i++) {
      const order: Path[] = i % 2 === 0 ? ["full", "fast"] : ["fast", "full"];
      for (const path of order) await lifecycle(path);
      if (backToBack) await backToBackLifecycle();
      floor.push(await engineFloor());
      options.onRun?.(i + 1);
    }
    return result;
  } finally {
    for (const [path, system] of Object.entries(systems)) {
      const file = join(system.dataDir, `session-bench-${path}.log`);
      writeFileSync(file, [...(system.server?.logs ?? []), ...(system.runner?.logs ?? [])].join(""));
      console.log(`  ${path} logs: ${file}`);
      await system.stop().catch(() => undefined);
    }
    await model?.close();
  }
}

export function printSessionBench(result: SessionBench): void {
  const { engine, runs, samples, floor } = result;
  const b2b = result.backToBack;
  const f = (ms: number) => `${(ms / 1000).toFixed(2)} s`;
  const floorP50 = p50(floor);
  console.log(
    `\n${engine} HarnessSession steps through the HTTP API, p50 of ${runs} runs (engine floor, a plain container → /readyz: ${f(floorP50)})`,
  );
  console.log(`| step | fast path off | fast path on | on/off | on/floor |`);
  console.log(`|---|---|---|---|---|`);
  for (const step of steps) {
    const full = p50(samples.full[step]);
    const fast = p50(samples.fast[step]);
    const label =
      step === "idle" ? "idle stop, past idleTimeout" : step === "heal" ? "killed → Ready again" : `${step}`;
    const perFloor =
      step === "idle" || step === "stop" || step === "settle" ? "–" : (fast / floorP50).toFixed(2);
    const perFull = step === "settle" ? "–" : (fast / full).toFixed(2);
    console.log(`| ${label} | ${f(full)} | ${f(fast)} | ${perFull} | ${perFloor} |`);
  }
  if (b2b.stop.length > 0) {
    console.log(
      `\n${engine}, fast path: settled (p50 of ${runs}) and back to back (p50 of ${b2b.stop.length}), engine floor ${f(floorP50)}`,
    );
    console.log(`| step | settled | back to back | back to back/floor |`);
    console.log(`|---|---|---|---|`);
    const rows = [
      ["stop right after another operation → Stopped", samples.fast.stop, b2b.stop],
      ["resume → Ready right after another operation", samples.fast.resume, b2b.resume],
    ] as const;
    for (const [label, settledRuns, b2bRuns] of rows)
      console.log(
        `| ${label} | ${f(p50([...settledRuns]))} | ${f(p50([...b2bRuns]))} | ${(p50([...b2bRuns]) / floorP50).toFixed(2)} |`,
      );
  }
}

if (import.meta.main) {
  const { values: flags, positionals } = parseArgs({
    options: {
      engine: { type: "string", default: "docker" },
      "back-to-back": { type: "boolean", default: false },
    },
    allowPositionals: true,
  });
  const runs = Number(positionals[0] ?? 3);
  if (!Number.isInteger(runs) || runs < 1)
    throw new Error(`runs must be a positive integer, got ${positionals[0]}`);
  const engine = flags.engine;
  if (engine !== "docker" && engine !== "kubernetes")
    throw new Error(`--engine must be docker or kubernetes, got ${engine}`);
  printSessionBench(
    await benchSessions({
      runs,
      engine,
      backToBack: flags["back-to-back"] === true,
      onRun: (done) => process.stderr.write(`  run ${done}/${runs} done\n`),
    }),
  );
}
