/**
 * What relaying a HarnessSession request costs, beside calling the adapter directly and beside a
 * well-known peer proxy, in the same run against the same adapter; and how long a session takes
 * to become Ready when created and when resumed.
 *
 *   node test/bench/relay-bench.ts [--sessions 3] [--requests 200] [--concurrency 1,50,200]
 *                                   [--embedded worker,in-process,websocket] [--baseline <checkout>]
 *                                   [--baseline-link worker] [--serve-node-options "--cpu-prof …"]
 *                                   (the test bed must be up: scripts/testbed up node docker pulumi image)
 *
 * `--embedded`: which `agent-sessions serve` setups (server and its embedded runner in one
 * process, what a new user runs) are paths beside the standalone runner, by
 * AGENT_SESSIONS_EMBEDDED_LINK: `worker` (the runner on a thread of its own, linked by a
 * MessagePort: serve's default), `in-process` (on the server's thread, linked in memory) and
 * `websocket` (on the server's thread over a loopback WebSocket); `--embedded none` for none. Each runs its own server and session of the same image.
 * `--baseline`: another checkout (e.g. `git worktree add /tmp/base <commit>`, node_modules linked)
 * runs a second server and runner with a session of its own; its relay is one more path, `base`,
 * taking its turns in the same rounds (today's relay beside the one before, in one run). With
 * `--baseline-link worker` (or `in-process`, `websocket`) the baseline is that checkout's `serve`
 * with its embedded runner on that link instead (`serve` before and after, in one run).
 * `--serve-node-options`: NODE_OPTIONS of the `serve` processes (the embedded paths' and such a
 * baseline's), e.g. `--serve-node-options="--cpu-prof --cpu-prof-dir=/tmp/prof"` (a profile per thread, written when
 * the process exits at the end of the run).
 *
 * The system is real: `agent-sessions serve --no-runner` and a separate `agent-sessions runner`
 * over the WebSocket (and `agent-sessions serve` with its embedded runner), Pulumi stacks on the
 * real dockerd, the reference image (v1alpha2 adapter), the loopback model server on our bridge in
 * its fast mode ("[fast]": no pause between streamed words), so the model is not what is measured.
 *
 * 1. Latency to Ready, session by session (one at a time): PUT HarnessSession → phase Ready
 *    (a Pulumi `up` of volume, network and container, the adapter's readiness, the agent session
 *    started), then PATCH stopped → Stopped, then PATCH running → Ready again. Status polled every
 *    50 ms. p50 and p99 (nearest rank).
 * 2. Relay, per request, from the first byte sent to the last byte of the reply, these paths to
 *    a session's adapter:
 *      runner client → server (POST /v1/namespaces/default/harnesssessions/{name}/requests)
 *             → standalone runner process (WebSocket) → adapter (undici) and back, with the
 *             server's accounting;
 *      embedded-wt, embedded, embedded-ws
 *             the same through `agent-sessions serve` and its embedded runner, on a worker
 *             thread, on the server's thread in memory, or over loopback (`--embedded`; a
 *             session of their own each, same image);
 *      chp    client → configurable-http-proxy (JupyterHub's proxy, default target the adapter)
 *             → adapter;
 *      direct client → adapter (`POST http://<container IP>:8080/v1/requests` with the
 *             session's adapter token, read from the container's environment: the runner holds
 *             it; fine for a benchmark on our own test bed).
 *    Non-streamed and streamed, at each concurrency (closed loop: that many clients, each sending
 *    its next request when the previous one is answered), `max(requests, 4 × concurrency)`
 *    requests per path and cell after a warm-up round, in 4 rounds in which the paths take turns
 *    (rotating order), so that the machine's other load falls on all three alike. The adapter keeps the conversation on its volume and
 *    sends all of it to the model, so the conversation is reset before each cell (all three paths
 *    start alike). Every request has a 30 s deadline; a failed or late one is counted as an error,
 *    not as a latency. Beside each path's figures, the CPU its processes (chp; server and runner;
 *    `serve`) spent per request, from /proc, and in brackets that of the first one's main thread:
 *    with the embedded runner on a worker thread, what is left on the server's event loop.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { Agent as Dispatcher, request } from "undici";
import { type ModelServer, startModelServer } from "../fixtures/model-server.ts";
import { dockerClient, dockerExec } from "../support/session-harness.ts";
import { BRIDGE_IP, type Json, System } from "../support/system.ts";
import { applyTestbedEnv, repoRoot } from "../support/testbed.ts";
import { percentile } from "./stats.ts";

const { values: args } = parseArgs({
  options: {
    sessions: { type: "string", default: "3" },
    requests: { type: "string", default: "200" },
    concurrency: { type: "string", default: "1,50,200" },
    embedded: { type: "string", default: "worker,in-process,websocket" },
    baseline: { type: "string" },
    "baseline-link": { type: "string" },
    "serve-node-options": { type: "string" },
  },
});
const EMBEDDED = args.embedded === "none" ? [] : args.embedded.split(",");
/** Per AGENT_SESSIONS_EMBEDDED_LINK: the path's name in the tables and its session's suffix. */
const EMBEDDED_PATHS: Record<string, { path: string; suffix: string }> = {
  worker: { path: "embedded-wt", suffix: "embwt" },
  "in-process": { path: "embedded", suffix: "emb" },
  websocket: { path: "embedded-ws", suffix: "embws" },
};
if (EMBEDDED.some((e) => !EMBEDDED_PATHS[e]))
  throw new Error(
    `--embedded: worker, in-process, websocket (comma-separated) or none, got ${args.embedded}`,
  );
const SESSIONS = Number(args.sessions);
const REQUESTS = Number(args.requests);
const CONCURRENCY = args.concurrency.split(",").map(Number);
if (!Number.isInteger(SESSIONS) || SESSIONS < 1)
  throw new Error(`--sessions: a positive integer, got ${args.sessions}`);
if (!Number.isInteger(REQUESTS) || REQUESTS < 1)
  throw new Error(`--requests: a positive integer, got ${args.requests}`);
if (CONCURRENCY.some((c) => !Number.isInteger(c) || c < 1))
  throw new Error(`--concurrency: positive integers, comma-separated, got ${args.concurrency}`);
applyTestbedEnv();

const API = "agent-sessions.dev/v1alpha1";
const NS = "/v1/namespaces/default";
const PREFIX = `relay-${randomBytes(2).toString("hex")}`;
/** Deadline of every request the bench makes (relay, status, control). */
const REQUEST_TIMEOUT_MS = 30_000;
const READY_TIMEOUT_MS = 300_000;
const DELETE_TIMEOUT_MS = 300_000;
/** Each cell's requests are made in this many rounds, the paths taking turns. */
const ROUNDS = 4;

/** Nearest-rank percentile. */

const BASELINE_LINK = args["baseline-link"];
if (BASELINE_LINK !== undefined && !EMBEDDED_PATHS[BASELINE_LINK])
  throw new Error(`--baseline-link: worker, in-process or websocket, got ${BASELINE_LINK}`);
/** Node options of the `serve` processes (the embedded paths' and the baseline's), e.g. `--cpu-prof`. */
const serveEnv: Record<string, string> =
  args["serve-node-options"] === undefined ? {} : { NODE_OPTIONS: args["serve-node-options"] };
const system = new System();
const base =
  args.baseline === undefined
    ? undefined
    : new System(
        undefined,
        BASELINE_LINK === undefined ? {} : { ...serveEnv, AGENT_SESSIONS_EMBEDDED_LINK: BASELINE_LINK },
        args.baseline,
      );
/** `serve` with its embedded runner, per link kind: path name, its system, its session. */
const embeddedPaths = EMBEDDED.map((link) => {
  const { path, suffix } = EMBEDDED_PATHS[link] as { path: string; suffix: string };
  return {
    path,
    system: new System(undefined, { ...serveEnv, AGENT_SESSIONS_EMBEDDED_LINK: link }),
    session: `${PREFIX}-${suffix}`,
  };
});
let model: ModelServer | undefined;
let chp: ChildProcess | undefined;
const created: string[] = [];

/** A control call with a deadline (System.call has none); a DELETE destroys a stack, so it gets longer. */
async function call(method: string, path: string, body?: unknown): Promise<{ status: number; body: Json }> {
  const deadline = method === "DELETE" ? DELETE_TIMEOUT_MS : REQUEST_TIMEOUT_MS;
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      system.call(method, path, body),
      new Promise<never>((_, reject) => {
        timer = setTimeout(
          () => reject(new Error(`${method} ${path}: no answer in ${deadline} ms`)),
          deadline,
        );
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}

async function must(method: string, path: string, body?: unknown): Promise<Json> {
  const res = await call(method, path, body);
  if (res.status >= 300) throw new Error(`${method} ${path}: HTTP ${res.status} ${JSON.stringify(res.body)}`);
  return res.body;
}

/** Polls the session every 50 ms until `phase`; ms from `since`. A Failed session ends the bench. */
async function reach(name: string, phase: string, since: number): Promise<{ ms: number; session: Json }> {
  const deadline = since + READY_TIMEOUT_MS;
  while (performance.now() < deadline) {
    const s = await must("GET", `${NS}/harnesssessions/${name}`);
    if (s.status?.phase === phase) return { ms: performance.now() - since, session: s };
    if (s.status?.phase === "Failed")
      throw new Error(`${name} Failed: ${JSON.stringify(s.status.conditions)}`);
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`${name} did not reach ${phase} in ${READY_TIMEOUT_MS} ms`);
}

async function lifecycle(): Promise<{ create: number[]; resume: number[]; container: string }> {
  const create: number[] = [];
  const resume: number[] = [];
  let container = "";
  for (let i = 0; i < SESSIONS; i += 1) {
    const name = `${PREFIX}-${i}`;
    const t0 = performance.now();
    created.push(name);
    await must("PUT", `${NS}/harnesssessions/${name}`, {
      apiVersion: API,
      kind: "HarnessSession",
      metadata: { name },
      spec: { agentRef: PREFIX, runtimeRef: "reference", desiredState: "running", idleTimeout: "1h" },
    });
    const ready = await reach(name, "Ready", t0);
    create.push(ready.ms);
    if (i === 0) container = ready.session.status.containerName;
    await must("PATCH", `${NS}/harnesssessions/${name}`, { spec: { desiredState: "stopped" } });
    await reach(name, "Stopped", performance.now());
    const t1 = performance.now();
    await must("PATCH", `${NS}/harnesssessions/${name}`, { spec: { desiredState: "running" } });
    resume.push((await reach(name, "Ready", t1)).ms);
    console.log(
      `  ${name}: create→Ready ${(create.at(-1)! / 1000).toFixed(2)} s, resume→Ready ${(resume.at(-1)! / 1000).toFixed(2)} s`,
    );
    // Only the first session serves the relay measurements: the others go, so they cost nothing.
    if (i > 0) await must("DELETE", `${NS}/harnesssessions/${name}`);
  }
  return { create, resume, container };
}

/** `pids`: our processes on the path (their CPU is counted per request; the first one's main thread apart). */
type Target = { name: string; url: string; token: string; dispatcher: Dispatcher; pids: number[] };

/** CPU ms so far of a process (all its threads) and of its main thread, from /proc (Linux). */
function cpuMs(pid: number): { process: number; main: number } {
  const ticks = (path: string) => {
    // Fields after the command's closing parenthesis: utime and stime are the 12th and 13th.
    const fields = readFileSync(path, "utf8").split(") ")[1]?.split(" ") ?? [];
    return Number(fields[11]) + Number(fields[12]);
  };
  const perTick = 1000 / 100; // USER_HZ
  return {
    process: ticks(`/proc/${pid}/stat`) * perTick,
    main: ticks(`/proc/${pid}/task/${pid}/stat`) * perTick,
  };
}
type Outcome = { ok: true; ms: number; firstByteMs: number } | { ok: false; error: string };

let sequence = 0;
async function once(target: Target, stream: boolean): Promise<Outcome> {
  sequence += 1;
  const id = `${target.name}-${sequence}`;
  const started = performance.now();
  try {
    const res = await request(target.url, {
      method: "POST",
      dispatcher: target.dispatcher,
      headers: { authorization: `Bearer ${target.token}`, "content-type": "application/json" },
      body: JSON.stringify({ id, input: `[fast] bench request ${sequence}`, stream }),
      signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
      headersTimeout: REQUEST_TIMEOUT_MS,
      bodyTimeout: REQUEST_TIMEOUT_MS,
    });
    let firstByte: number | undefined;
    let text = "";
    for await (const piece of res.body) {
      firstByte ??= performance.now();
      text += Buffer.from(piece as Uint8Array).toString("utf8");
    }
    const ms = performance.now() - started;
    if (res.statusCode !== 200) return { ok: false, error: `HTTP ${res.statusCode}` };
    if (!text.includes('"outcome":"succeeded"')) return { ok: false, error: "no succeeded result" };
    return { ok: true, ms, firstByteMs: (firstByte ?? performance.now()) - started };
  } catch (error) {
    const e = error as { name?: string; code?: string; message?: string };
    return {
      ok: false,
      error: e.name === "TimeoutError" ? "timeout" : (e.code ?? e.message ?? String(error)),
    };
  }
}

type Cell = {
  target: string;
  stream: boolean;
  concurrency: number;
  latencies: number[];
  firstBytes: number[];
  errors: Map<string, number>;
  seconds: number;
  /** CPU ms of the path's processes over the cell, and of the first one's main thread. */
  cpu: { process: number; main: number };
};

/** `total` requests by `concurrency` closed-loop clients. */
async function cell(target: Target, stream: boolean, concurrency: number, total: number): Promise<Cell> {
  const out: Cell = {
    target: target.name,
    stream,
    concurrency,
    latencies: [],
    firstBytes: [],
    errors: new Map(),
    seconds: 0,
    cpu: { process: 0, main: 0 },
  };
  let next = 0;
  const before = target.pids.map(cpuMs);
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < total) {
        next += 1;
        const r = await once(target, stream);
        if (r.ok) {
          out.latencies.push(r.ms);
          out.firstBytes.push(r.firstByteMs);
        } else out.errors.set(r.error, (out.errors.get(r.error) ?? 0) + 1);
      }
    }),
  );
  out.seconds = (performance.now() - t0) / 1000;
  target.pids.map(cpuMs).forEach((after, i) => {
    const was = before[i] as { process: number; main: number };
    out.cpu.process += after.process - was.process;
    if (i === 0) out.cpu.main += after.main - was.main;
  });
  return out;
}

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as { port: number };
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/** configurable-http-proxy on loopback, its default target the adapter. */
async function startChp(adapter: string): Promise<string> {
  const [port, apiPort] = [await freePort(), await freePort()];
  const apiToken = randomBytes(16).toString("hex");
  const logs: string[] = [];
  chp = spawn(
    join(repoRoot, "node_modules", ".bin", "configurable-http-proxy"),
    [
      "--ip",
      "127.0.0.1",
      "--port",
      String(port),
      "--api-ip",
      "127.0.0.1",
      "--api-port",
      String(apiPort),
    ].concat(["--default-target", `http://${adapter}`, "--log-level", "warn"]),
    { env: { ...process.env, CONFIGPROXY_AUTH_TOKEN: apiToken }, stdio: ["ignore", "pipe", "pipe"] },
  );
  chp.stdout?.on("data", (d: Buffer) => logs.push(d.toString()));
  chp.stderr?.on("data", (d: Buffer) => logs.push(d.toString()));
  const deadline = Date.now() + 30_000;
  while (Date.now() < deadline) {
    const up = await request(`http://127.0.0.1:${apiPort}/api/routes`, {
      headers: { authorization: `token ${apiToken}` },
      signal: AbortSignal.timeout(2_000),
    })
      .then(async (res) => {
        await res.body.dump();
        return res.statusCode === 200;
      })
      .catch(() => false);
    if (up) return `http://127.0.0.1:${port}`;
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`configurable-http-proxy did not start: ${logs.join("").slice(-2000)}`);
}

/** Our processes' CPU per answered request, the first process's main thread in brackets. */
function cpuPerRequest(c: Cell): string {
  const n = c.latencies.length + [...c.errors.values()].reduce((a, b) => a + b, 0);
  if (c.cpu.process === 0 || n === 0) return "";
  return `${(c.cpu.process / n).toFixed(2)} (${(c.cpu.main / n).toFixed(2)})`;
}

const ms = (v: number) => (Number.isFinite(v) ? v.toFixed(1) : "-").padStart(8);

function printCells(cells: Cell[]): void {
  console.log(
    `\n  ${"mode".padEnd(9)}${"conc".padStart(5)}  ${"path".padEnd(12)}${"ok".padStart(6)}${"err".padStart(5)}${"p50 ms".padStart(9)}${"p99 ms".padStart(9)}${"1st byte p50".padStart(13)}${"req/s".padStart(8)}${"CPU ms/req (main)".padStart(19)}   overhead vs direct (p50 / p99 ms)`,
  );
  for (const c of cells) {
    const direct = cells.find(
      (d) => d.target === "direct" && d.stream === c.stream && d.concurrency === c.concurrency,
    );
    const p50 = percentile(c.latencies, 50);
    const p99 = percentile(c.latencies, 99);
    const overhead =
      direct && c.target !== "direct"
        ? `${(p50 - percentile(direct.latencies, 50)).toFixed(1).padStart(7)} / ${(p99 - percentile(direct.latencies, 99)).toFixed(1)}`
        : "";
    const errors = [...c.errors].map(([e, n]) => `${e}×${n}`).join(", ");
    console.log(
      `  ${(c.stream ? "streamed" : "plain").padEnd(9)}${String(c.concurrency).padStart(5)}  ${c.target.padEnd(12)}${String(c.latencies.length).padStart(6)}${String([...c.errors.values()].reduce((a, b) => a + b, 0)).padStart(5)}${ms(p50)}${ms(p99)}${c.stream ? ms(percentile(c.firstBytes, 50)).padStart(13) : "".padStart(13)}${(c.latencies.length / c.seconds).toFixed(0).padStart(8)}${cpuPerRequest(c).padStart(19)}   ${overhead}${errors ? `  [${errors}]` : ""}`,
    );
  }
}

/**
 * The table the README carries: per mode, one client's p50 (and its overhead over direct), and at
 * each higher concurrency the throughput with its ratio to direct.
 */
function printSummary(cells: Cell[]): void {
  const paths = [...new Set(cells.map((c) => c.target))];
  console.log(`\nsummary (p50 at 1 client, overhead over direct in brackets; req/s above, × direct):`);
  console.log(`  ${"mode".padEnd(9)}${"conc".padStart(5)}  ${paths.map((p) => p.padStart(18)).join("")}`);
  for (const stream of [false, true])
    for (const concurrency of CONCURRENCY) {
      const of = (path: string) =>
        cells.find((c) => c.target === path && c.stream === stream && c.concurrency === concurrency);
      const direct = of("direct");
      if (!direct) continue;
      const figure = (c: Cell | undefined): string => {
        if (!c || c.latencies.length === 0) return "-";
        if (concurrency === 1) {
          const p50 = percentile(c.latencies, 50);
          return c === direct
            ? `${p50.toFixed(2)} ms`
            : `${p50.toFixed(2)} (+${(p50 - percentile(direct.latencies, 50)).toFixed(2)})`;
        }
        const rate = c.latencies.length / c.seconds;
        const directRate = direct.latencies.length / direct.seconds;
        return c === direct
          ? `${rate.toFixed(0)} req/s`
          : `${rate.toFixed(0)} (${(rate / directRate).toFixed(2)}×)`;
      };
      console.log(
        `  ${(stream ? "streamed" : "plain").padEnd(9)}${String(concurrency).padStart(5)}  ${paths.map((p) => figure(of(p)).padStart(18)).join("")}`,
      );
    }
}

/** On another system (already started): the Agent and one session of it, Ready; its container. */
async function sessionOn(b: System, what: string, name: string): Promise<string> {
  const bmust = async (method: string, path: string, body?: unknown) => {
    const res = await b.call(method, path, body);
    if (res.status >= 300)
      throw new Error(`${what} ${method} ${path}: HTTP ${res.status} ${JSON.stringify(res.body)}`);
    return res.body;
  };
  await bmust("PUT", `${NS}/agents/${PREFIX}`, agentSpec());
  await bmust("PUT", `${NS}/harnesssessions/${name}`, {
    apiVersion: API,
    kind: "HarnessSession",
    metadata: { name },
    spec: { agentRef: PREFIX, runtimeRef: "reference", desiredState: "running", idleTimeout: "1h" },
  });
  const deadline = performance.now() + READY_TIMEOUT_MS;
  while (performance.now() < deadline) {
    const s = await bmust("GET", `${NS}/harnesssessions/${name}`);
    if (s.status?.phase === "Ready") return s.status.containerName;
    if (s.status?.phase === "Failed") throw new Error(`${what} ${name} Failed`);
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`${what} ${name} did not become Ready`);
}

function agentSpec(): unknown {
  return {
    apiVersion: API,
    kind: "Agent",
    metadata: { name: PREFIX },
    spec: {
      runtimeRef: "reference",
      credentials: [{ name: "MODEL_API_KEY", secretRef: { env: "BENCH_MODEL_KEY" } }],
      model: { baseUrl: model?.url, name: "tiny" },
      egress: [{ cidr: `${BRIDGE_IP}/32`, port: model?.port }],
    },
  };
}

function pidsOf(...children: (ChildProcess | undefined)[]): number[] {
  return children.flatMap((c) => (c?.pid === undefined ? [] : [c.pid]));
}

/** A path through one of our servers to its session (besides the standalone runner's). */
type ExtraPath = { path: string; system: System; session: string; container: string };

async function relay(container: string, extra: ExtraPath[]): Promise<Cell[]> {
  const docker = dockerClient();
  const inspected = await docker.getContainer(container).inspect();
  const token = (inspected.Config.Env ?? [])
    .find((e) => e.startsWith("ADAPTER_TOKEN="))
    ?.slice("ADAPTER_TOKEN=".length);
  const ip = Object.values(inspected.NetworkSettings.Networks ?? {})[0]?.IPAddress;
  if (!token || !ip) throw new Error(`${container}: no adapter token or IP address`);
  const adapter = `${ip}:8080`;
  const chpUrl = await startChp(adapter);
  // Idle sockets are dropped before the servers' own keep-alive timeout (Node's default: 5 s):
  // a path waits for its turn longer than that, and reusing a socket the server is closing
  // would count a connection reset against the path.
  const dispatcher = () =>
    new Dispatcher({ connections: 512, keepAliveTimeout: 2_000, keepAliveMaxTimeout: 2_000 });
  const targets: Target[] = [
    { name: "direct", url: `http://${adapter}/v1/requests`, token, dispatcher: dispatcher(), pids: [] },
    { name: "chp", url: `${chpUrl}/v1/requests`, token, dispatcher: dispatcher(), pids: pidsOf(chp) },
    {
      name: "runner",
      url: `${system.url}${NS}/harnesssessions/${PREFIX}-0/requests`,
      token: system.adminToken,
      dispatcher: dispatcher(),
      pids: pidsOf(system.server?.child, system.runner?.child),
    },
    ...extra.map((e) => ({
      name: e.path,
      url: `${e.system.url}${NS}/harnesssessions/${e.session}/requests`,
      token: e.system.adminToken,
      dispatcher: dispatcher(),
      pids: pidsOf(e.system.server?.child, e.system.runner?.child),
    })),
  ];
  const resetConversation = async () => {
    for (const c of [container, ...extra.map((e) => e.container)]) {
      const r = await dockerExec(docker.getContainer(c), [
        "/bin/node",
        "-e",
        "require('node:fs').writeFileSync('/workspace/conversation.json', '[]')",
      ]);
      if (r.exitCode !== 0) throw new Error(`resetting the conversation: exit ${r.exitCode} ${r.output}`);
    }
  };
  console.log(`\nrelay: adapter ${adapter}, configurable-http-proxy ${chpUrl}, server ${system.url}`);
  const cells: Cell[] = [];
  for (const stream of [false, true])
    for (const concurrency of CONCURRENCY) {
      for (const target of targets) {
        await resetConversation();
        const warm = await cell(target, stream, concurrency, concurrency);
        if (warm.latencies.length === 0)
          throw new Error(`${target.name} warm-up failed: ${JSON.stringify([...warm.errors])}`);
      }
      // The machine's other load varies: the paths take turns, in rotating order, round by round.
      const perRound = Math.ceil(Math.max(REQUESTS, 4 * concurrency) / ROUNDS);
      const merged = new Map<string, Cell>();
      for (let round = 0; round < ROUNDS; round += 1)
        for (let k = 0; k < targets.length; k += 1) {
          const target = targets[(round + k) % targets.length] as Target;
          await resetConversation();
          const part = await cell(target, stream, concurrency, perRound);
          const into = merged.get(target.name);
          if (!into) merged.set(target.name, part);
          else {
            into.latencies.push(...part.latencies);
            into.firstBytes.push(...part.firstBytes);
            for (const [e, n] of part.errors) into.errors.set(e, (into.errors.get(e) ?? 0) + n);
            into.seconds += part.seconds;
            into.cpu.process += part.cpu.process;
            into.cpu.main += part.cpu.main;
          }
        }
      const done = targets.map((t) => merged.get(t.name) as Cell);
      cells.push(...done);
      printCells(done);
    }
  await Promise.all(targets.map((t) => t.dispatcher.close()));
  return cells;
}

try {
  model = await startModelServer(BRIDGE_IP, 0);
  // The Agent's credential comes from the server's environment (offered in system.ts).
  process.env.BENCH_MODEL_KEY = `sk-bench-${randomBytes(8).toString("hex")}`;
  await system.startServer();
  await system.startRunner();
  await must("PUT", `${NS}/agents/${PREFIX}`, agentSpec());
  console.log(`relay bench: ${SESSIONS} session(s), data ${system.dataDir}\n\nlatency to Ready:`);
  const { create, resume, container } = await lifecycle();
  const extra: ExtraPath[] = [];
  for (const e of embeddedPaths) {
    await e.system.startEmbedded();
    extra.push({ ...e, container: await sessionOn(e.system, e.path, e.session) });
    console.log(
      `${e.path}: agent-sessions serve (embedded runner), server ${e.system.url}, container ${extra.at(-1)?.container}`,
    );
  }
  if (base) {
    if (BASELINE_LINK === undefined) {
      await base.startServer();
      await base.startRunner();
    } else await base.startEmbedded();
    extra.push({
      path: "base",
      system: base,
      session: `${PREFIX}-base`,
      container: await sessionOn(base, "baseline", `${PREFIX}-base`),
    });
    console.log(`baseline: ${args.baseline}, server ${base.url}, container ${extra.at(-1)?.container}`);
  }
  const cells = await relay(container, extra);
  console.log(`\nlatency to Ready over ${SESSIONS} session(s) (status polled every 50 ms):`);
  for (const [what, values] of [
    ["create→Ready", create],
    ["resume→Ready", resume],
  ] as const)
    console.log(
      `  ${what.padEnd(14)} p50 ${(percentile(values, 50) / 1000).toFixed(2)} s   p99 ${(percentile(values, 99) / 1000).toFixed(2)} s   min ${(Math.min(...values) / 1000).toFixed(2)} s   max ${(Math.max(...values) / 1000).toFixed(2)} s`,
    );
  console.log(
    `\nrelay latency, first byte sent → last byte of the reply; model in fast mode; max(${REQUESTS}, 4 × concurrency) requests per path and cell in ${ROUNDS} rounds:`,
  );
  printCells(cells);
  printSummary(cells);
} finally {
  chp?.kill("SIGTERM");
  for (const name of created)
    await call("DELETE", `${NS}/harnesssessions/${name}`).catch((e) =>
      console.error(`deleting ${name}: ${e}`),
    );
  await call("DELETE", `${NS}/agents/${PREFIX}`).catch(() => undefined);
  const others = [
    ...embeddedPaths.map((e) => ({ what: e.path, system: e.system, session: e.session })),
    ...(base ? [{ what: "baseline", system: base, session: `${PREFIX}-base` }] : []),
  ];
  const otherLogs = others.map(
    (o) =>
      `--- ${o.what} (server${o.what === "baseline" ? "" : " and its embedded runner"}) ---\n${(o.system.server?.logs ?? []).join("")}`,
  );
  for (const o of others) {
    if (!o.system.server) continue;
    await o.system
      .call("DELETE", `${NS}/harnesssessions/${o.session}`)
      .catch((e) => console.error(`deleting the ${o.what} session: ${e}`));
    await o.system.call("DELETE", `${NS}/agents/${PREFIX}`).catch(() => undefined);
    await o.system.stop();
  }
  // The processes' logs outlive the run (a failed request is read there); the data goes.
  const logs = join(tmpdir(), `relay-bench-${PREFIX}.log`);
  writeFileSync(
    logs,
    (["server", "runner"] as const)
      .map((w) => `--- ${w} ---\n${(system[w]?.logs ?? []).join("")}`)
      .concat(otherLogs)
      .join("\n"),
  );
  await system.stop();
  await model?.close();
  for (const s of [system, ...others.map((o) => o.system)])
    rmSync(s.dataDir, { recursive: true, force: true });
  console.log(`\nserver and runner logs: ${logs}`);
}
