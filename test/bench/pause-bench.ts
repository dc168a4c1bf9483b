/**
 * The paused tier (issue 37) as a client sees it, through the HTTP API of a real system on Docker,
 * beside the engine floor measured in the same run.
 *
 *   node test/bench/pause-bench.ts [runs=5] [--runtimes reference,pi,compass,hermes] [--settled]
 *     (the test bed must be up: scripts/testbed up node docker pulumi image base-image pi-image
 *      compass-image hermes-image)
 *
 * One system (`serve --no-runner` and a `runner --engine docker`), each runtime's image as the test
 * bed built it and the loopback model server, one session per runtime (the runtimes one after the
 * other). Each run, issued back to back (no settling wait):
 *   running  a request to the Ready session → the first byte of its answer (the relay's own cost)
 *   pause    PATCH desiredState paused → phase Paused, and → the container frozen (the engine's
 *            State.Paused, read by inspect)
 *   wake     a request to the Paused session → the first byte of its answer (the wake included)
 *   then desiredState running again (→ Ready) for the next run.
 * The engine floor, in the same run: a plain container of the same image, `POST
 * /containers/{id}/pause` → returned, and `/unpause` → its adapter's first `/readyz` answer.
 * Status is polled every 5 ms (each figure up to 5 ms late). p50 is nearest-rank. Also printed:
 * what a paused session of each runtime holds in memory (docker stats: usage less the page cache),
 * and the slowest run of each step (a slow pause shows in the wake issued right after it).
 * `--settled` waits, before each operation, for the runner's background recordings to finish
 * (test/bench/settle.ts). test/bench/live-bench.ts runs it (`benchPause`) for issue 37's table.
 */
import { randomBytes } from "node:crypto";
import { parseArgs } from "node:util";
import { containerMemoryBytes } from "../../runner/docker/pause.ts";
import { modelAgent } from "../fixtures/agent-manifest.ts";
import type { ModelServer } from "../fixtures/model-server.ts";
import { dockerClient, uniqueName } from "../support/session-harness.ts";
import { type Json, startSessionModelServer, System } from "../support/system.ts";
import { applyTestbedEnv, builtImage, referenceImage, runtimeImagePart } from "../support/testbed.ts";
import { settled } from "./settle.ts";
import { p50 } from "./stats.ts";

const API = "agent-sessions.dev/v1alpha1";
const NS = "/v1/namespaces/default";
const POLL_MS = 5;
const TIMEOUT_MS = 120_000;

export type PauseSamples = {
  running: number[];
  pausePhase: number[];
  pauseFrozen: number[];
  wake: number[];
  memory: number[];
};
export type PauseBench = {
  runs: number;
  settled: boolean;
  /** The engine floor: pause call → returned, unpause → first /readyz answer (ms). */
  floor: { pause: number[]; wake: number[] };
  byRuntime: Map<string, PauseSamples>;
};

const newSamples = (): PauseSamples => ({
  running: [],
  pausePhase: [],
  pauseFrozen: [],
  wake: [],
  memory: [],
});

/**
 * `runs` pauses and wakes of one session per runtime (each runtime's image as the test bed built
 * it), beside the engine floor; `settle`: each operation after the previous one's recording.
 */
export async function benchPause(options: {
  runs: number;
  runtimes: string[];
  settle?: boolean;
  onRun?: (runtime: string, done: number) => void;
}): Promise<PauseBench> {
  const { runs, runtimes } = options;
  const settle = options.settle === true;
  for (const r of runtimes) runtimeImagePart(r); // an unknown one is refused before anything starts
  applyTestbedEnv();
  const PREFIX = `pb-${randomBytes(2).toString("hex")}`;
  const docker = dockerClient();
  const system = new System(undefined, {
    BENCH_MODEL_KEY: "bench",
    ...Object.fromEntries(
      runtimes.map((r) => [`AGENT_SESSIONS_${r.toUpperCase()}_IMAGE`, builtImage(runtimeImagePart(r)).image]),
    ),
  });
  const result: PauseBench = { runs, settled: settle, floor: { pause: [], wake: [] }, byRuntime: new Map() };
  const { floor, byRuntime } = result;
  let model: ModelServer | undefined;

  const must = async (method: string, path: string, body?: unknown): Promise<Json> => {
    const res = await system.call(method, path, body);
    if (res.status >= 300)
      throw new Error(`${method} ${path}: HTTP ${res.status} ${JSON.stringify(res.body)}`);
    return res.body;
  };
  const settleFirst = async () => {
    if (settle) await settled(system);
  };

  const reach = async (
    name: string,
    ok: (s: Json) => boolean | Promise<boolean>,
    since: number,
  ): Promise<number> => {
    const deadline = since + TIMEOUT_MS;
    while (performance.now() < deadline) {
      const s = await must("GET", `${NS}/harnesssessions/${name}`);
      if (await ok(s)) return performance.now() - since;
      if (s.status?.phase === "Failed")
        throw new Error(`${name} Failed: ${JSON.stringify(s.status.conditions)}`);
      await new Promise((r) => setTimeout(r, POLL_MS));
    }
    throw new Error(`${name} did not get there in ${TIMEOUT_MS} ms`);
  };

  const frozen = async (container: string) => (await docker.getContainer(container).inspect()).State.Paused;

  /** A request → the first byte of its answer, ms. */
  const firstByte = async (name: string, input: string): Promise<number> => {
    const t0 = performance.now();
    const res = await fetch(`${system.url}${NS}/harnesssessions/${name}/requests`, {
      method: "POST",
      headers: { authorization: `Bearer ${system.adminToken}`, "content-type": "application/json" },
      body: JSON.stringify({ input }),
    });
    const reader = res.body?.getReader();
    const first = await reader?.read();
    const ms = performance.now() - t0;
    if (res.status !== 200 || !first?.value?.length) throw new Error(`request: HTTP ${res.status}`);
    while (!(await reader?.read())?.done) {
      // drain the rest
    }
    return ms;
  };

  const run = async (name: string, container: string, samples: PauseSamples): Promise<void> => {
    const url = `${NS}/harnesssessions/${name}`;
    await settleFirst();
    samples.running.push(await firstByte(name, "hello"));
    await settleFirst();
    const t0 = performance.now();
    await must("PATCH", url, { spec: { desiredState: "paused" } });
    samples.pausePhase.push(await reach(name, (s) => s.status?.phase === "Paused", t0));
    samples.pauseFrozen.push(await reach(name, () => frozen(container), t0));
    samples.memory.push((await containerMemoryBytes(docker, container)) ?? Number.NaN);
    await settleFirst();
    samples.wake.push(await firstByte(name, "hello again"));
    await settleFirst();
    const t1 = performance.now();
    await must("PATCH", url, { spec: { desiredState: "running" } });
    await reach(name, (s) => s.status?.phase === "Ready" && s.spec.desiredState === "running", t1);
  };

  /** The engine floor: a plain container of the image paused (→ returned), then unpaused (→ /readyz). */
  const engineFloor = async (): Promise<void> => {
    const env = { ADAPTER_PORT: "8080", AGENT_WORKSPACE: "/tmp", ADAPTER_TOKEN: "floor" };
    const container = await docker.createContainer({
      name: uniqueName("bench-pause-floor"),
      Image: referenceImage().image,
      Env: Object.entries(env).map(([k, v]) => `${k}=${v}`),
      Labels: { "agent-sessions.dev/bench": "floor" },
    });
    const ready = async (ip: string) =>
      fetch(`http://${ip}:8080/readyz`, { signal: AbortSignal.timeout(1000) }).then(
        (r) => r.ok,
        () => false,
      );
    try {
      await container.start();
      const ip = Object.values((await container.inspect()).NetworkSettings.Networks)[0]?.IPAddress ?? "";
      const started = performance.now();
      while (!(await ready(ip))) {
        if (performance.now() - started > 60_000) throw new Error("floor container never ready");
        await new Promise((r) => setTimeout(r, 10));
      }
      let t0 = performance.now();
      await container.pause();
      floor.pause.push(performance.now() - t0);
      t0 = performance.now();
      await container.unpause();
      while (!(await ready(ip))) await new Promise((r) => setTimeout(r, 1));
      floor.wake.push(performance.now() - t0);
    } finally {
      await container.remove({ force: true }).catch(() => undefined);
    }
  };

  try {
    model = await startSessionModelServer("docker");
    await system.startServer();
    await system.startRunner(["--engine", "docker"]);
    for (const runtime of runtimes) {
      const samples = newSamples();
      byRuntime.set(runtime, samples);
      const agent = `${PREFIX}-${runtime}`;
      await must(
        "PUT",
        `${NS}/agents/${agent}`,
        modelAgent(
          agent,
          { url: model.url, port: model.port },
          { runtimeRef: runtime, secretEnv: "BENCH_MODEL_KEY" },
        ),
      );
      const name = `${PREFIX}-${runtime.slice(0, 4)}`;
      await must("PUT", `${NS}/harnesssessions/${name}`, {
        apiVersion: API,
        kind: "HarnessSession",
        metadata: { name },
        spec: { agentRef: agent, runtimeRef: runtime, desiredState: "running", idleTimeout: "1h" },
      });
      await reach(name, (s) => s.status?.phase === "Ready", performance.now());
      const container: string = (await must("GET", `${NS}/harnesssessions/${name}`)).status.containerName;
      for (let i = 0; i < runs; i++) {
        await engineFloor();
        await run(name, container, samples);
        options.onRun?.(runtime, i + 1);
      }
      await system.call("DELETE", `${NS}/harnesssessions/${name}`);
    }
    return result;
  } finally {
    await system.stop().catch(() => undefined);
    await model?.close();
  }
}

export function printPauseBench(result: PauseBench): void {
  const { runs, floor, byRuntime } = result;
  const f = (ms: number) => `${ms.toFixed(0)} ms`;
  const mode = result.settled ? "settled (each operation after the previous recording)" : "back to back";
  console.log(
    `\nDocker, the paused tier through the HTTP API, p50 of ${runs} runs per runtime, ${mode} (polled every ${POLL_MS} ms)`,
  );
  console.log(
    `engine floor (a plain reference container, same runs): pause call → returned ${f(p50(floor.pause))}, unpause → first /readyz answer ${f(p50(floor.wake))}\n`,
  );
  console.log(
    "| runtime | request to Ready → first byte | request to Paused → first byte (wake included) | PATCH paused → phase Paused | → container frozen | paused memory |",
  );
  console.log("|---|---|---|---|---|---|");
  for (const [runtime, s] of byRuntime)
    console.log(
      `| ${runtime} | ${f(p50(s.running))} | ${f(p50(s.wake))} | ${f(p50(s.pausePhase))} | ${f(p50(s.pauseFrozen))} | ${(p50(s.memory) / 2 ** 20).toFixed(1)} MiB |`,
    );
  // The tail: one slow pause shows in the wake right after it (the wake waits for the pause's answer).
  for (const [runtime, s] of byRuntime)
    console.log(
      `${runtime} slowest of ${runs}: request to Paused → first byte ${f(Math.max(...s.wake))} (over 500 ms: ${s.wake.filter((ms) => ms > 500).length}), PATCH paused → phase Paused ${f(Math.max(...s.pausePhase))}, → frozen ${f(Math.max(...s.pauseFrozen))}`,
    );
  console.log(`samples (ms): ${JSON.stringify({ floor, ...Object.fromEntries(byRuntime) })}`);
}

if (import.meta.main) {
  const { positionals, values } = parseArgs({
    allowPositionals: true,
    options: {
      runtimes: { type: "string", default: "reference" },
      settled: { type: "boolean", default: false },
    },
  });
  const runs = Number(positionals[0] ?? 5);
  if (!Number.isInteger(runs) || runs < 1)
    throw new Error(`runs must be a positive integer, got ${positionals[0]}`);
  printPauseBench(
    await benchPause({
      runs,
      runtimes: values.runtimes.split(","),
      settle: values.settled,
      onRun: (runtime, done) => process.stderr.write(`${runtime}: run ${done}/${runs} done\n`),
    }),
  );
}
