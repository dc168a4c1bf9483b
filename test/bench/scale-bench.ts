/**
 * Scale benchmark: one real server tracking many sessions, driven by a runner with a simulated
 * engine (the only place such a runner is allowed: test/bench/simulated-runner.ts).
 *
 *   node test/bench/scale-bench.ts [sessions] [subscribers] [frames]
 *     (defaults 10000, 1000, 500; needs no Docker or Kubernetes)
 *   SCALE_BENCH_RUNNERS (default 10) simulated runners; SCALE_BENCH_PROFILE=<dir> writes CPU
 *   profiles of the server and runners; SCALE_BENCH_HEAP=<dir> lets SIGUSR2 write heap snapshots
 *   there; SCALE_BENCH_KEEP=1 keeps the data directory (logs); SCALE_BENCH_SERVER_FLAGS="…"
 *   replaces the server's Node flags (SERVER_NODE_FLAGS; "" for Node's defaults).
 *   AGENT_SESSIONS_DATABASE_URL=postgres://… (an empty database) runs the server on PostgreSQL
 *   instead of SQLite in its data directory.
 *
 * The server (`node proxy/main.ts`) and the simulated runner are processes of their own, so the
 * server's RSS (/proc/<pid>/status VmRSS) is its alone. Everything goes through the public API:
 *
 * 1. HarnessSessions are PUT (at most WINDOW waiting for their READY frame at a time); each is
 *    provisioned and its agent session started through the runner link. Measured at 100 sessions
 *    (the baseline) and again at `sessions`: create throughput, server RSS, idle-sweep time
 *    (`agent_sessions_idle_sweep_duration_seconds` from /metrics: Δsum/Δcount over ~11 s, which
 *    includes one resync pass), GetAgentStatus(all): its first page (default size) p50/p99 over
 *    CALLS calls and the walk of every page of 1,000.
 * 2. SSE fan-out with 1 subscriber, then `subscribers`, each following every session
 *    (`GET /v1/events`): a steady phase (STEADY_RATE frames/s) for latency and a burst (`frames`
 *    frames at once) for throughput. Each frame carries the simulated agent's `sent_at`; latency
 *    is sent_at → parsed by a subscriber; throughput is frames delivered to all subscribers / s.
 */
import { type ChildProcess, fork, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { createWriteStream, mkdtempSync, readFileSync, rmSync } from "node:fs";
import http from "node:http";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { preciseNow } from "./simulated-driver.ts";
import { percentile } from "./stats.ts";

const SESSIONS = positive(process.argv[2], 10_000, "sessions");
const SUBSCRIBERS = positive(process.argv[3], 1_000, "subscribers");
const BURST_FRAMES = positive(process.argv[4], 500, "frames");
const BASELINE_SESSIONS = Math.min(100, SESSIONS);
/** HarnessSessions PUT and not yet READY at any time. */
const WINDOW = 64;
const CALLS = 20;
const STEADY_RATE = 20;
const STEADY_SECONDS = 5;
/** Frames are spread over this many sessions. */
const EMITTING_SESSIONS = 100;
/**
 * Simulated runners the sessions are spread over. A runner saves its whole session set on every
 * change (runner/sessions/session-file.ts), which is quadratic on one runner holding 10,000; real runners
 * hold ~100 each (default capacity).
 */
const RUNNERS = positive(process.env.SCALE_BENCH_RUNNERS, 10, "SCALE_BENCH_RUNNERS");

const here = dirname(fileURLToPath(import.meta.url));
const repoRoot = join(here, "..", "..");
const NS = "default";
const API = "agent-sessions.dev/v1alpha1";

function positive(raw: string | undefined, fallback: number, name: string): number {
  const n = raw === undefined ? fallback : Number(raw);
  if (!Number.isInteger(n) || n < 1) throw new Error(`${name} must be a positive integer, got ${raw}`);
  return n;
}

/** Nearest-rank percentile. */

function sortedOf(values: Iterable<number>): Float64Array {
  return Float64Array.from(values).sort();
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** The soft limit of open files of this process (subscribers need one socket each). */
function openFileLimit(): number {
  const line = readFileSync("/proc/self/limits", "utf8")
    .split("\n")
    .find((l) => l.startsWith("Max open files"));
  const soft = line?.split(/\s{2,}/)[1];
  return soft === "unlimited" ? Number.POSITIVE_INFINITY : Number(soft);
}

/** VmRSS and VmHWM of a process, in MiB. */
function memoryOf(pid: number): { rss: number; peak: number } {
  const status = readFileSync(`/proc/${pid}/status`, "utf8");
  const kib = (key: string) =>
    Number(new RegExp(`^${key}:\\s+(\\d+) kB`, "m").exec(status)?.[1] ?? Number.NaN);
  return { rss: kib("VmRSS") / 1024, peak: kib("VmHWM") / 1024 };
}

/** CPU seconds (user + system) a process has used so far. */
function cpuSecondsOf(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  // utime and stime are fields 14 and 15 of /proc/<pid>/stat (11 and 12 after the name).
  return (Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS;
}
const CLOCK_TICKS = 100;

/** `SCALE_BENCH_PROFILE=<dir>`: CPU profiles of the server and the runner, written when they exit. */
function profileFlags(name: string): string[] {
  const dir = process.env.SCALE_BENCH_PROFILE;
  const heap = process.env.SCALE_BENCH_HEAP;
  return [
    // `kill -USR2 <pid>` writes a heap snapshot of that process into SCALE_BENCH_HEAP.
    ...(heap ? ["--heapsnapshot-signal=SIGUSR2", `--diagnostic-dir=${heap}`] : []),
    ...(dir ? ["--cpu-prof", `--cpu-prof-dir=${dir}`, `--cpu-prof-name=${name}.cpuprofile`] : []),
  ];
}

// ── processes ─────────────────────────────────────────────────────────────────────────────────

/**
 * The Node flags the server runs with (bin/agent-sessions passes the same): V8's young generation
 * capped at 2 × 16 MiB. By default it grows to 2 × 64 MiB under a steady allocation rate and
 * stays there, most of the server's RSS at 10,000 sessions (the live heap is ~30 MiB). The old
 * generation may reach 128 MiB before a full GC (bin/agent-sessions says why; what it costs here
 * in RSS is for this benchmark to show).
 */
const SERVER_NODE_FLAGS = ["--max-semi-space-size=16", "--initial-old-space-size=128"];

const dataDir = mkdtempSync(join(tmpdir(), "scale-bench-"));
const adminToken = randomBytes(24).toString("base64url");
const runnerToken = randomBytes(24).toString("base64url");
const children: ChildProcess[] = [];

async function startServer(): Promise<{ child: ChildProcess; url: string }> {
  const log = createWriteStream(join(dataDir, "server.log"));
  const nodeFlags = process.env.SCALE_BENCH_SERVER_FLAGS?.split(" ").filter(Boolean) ?? SERVER_NODE_FLAGS;
  const child = spawn(
    process.execPath,
    [...nodeFlags, ...profileFlags("server"), join(repoRoot, "proxy", "main.ts")],
    {
      cwd: repoRoot,
      env: {
        ...process.env,
        AGENT_SESSIONS_PORT: "0",
        AGENT_SESSIONS_HOST: "127.0.0.1",
        AGENT_SESSIONS_DATA_DIR: join(dataDir, "server"),
        AGENT_SESSIONS_TOKEN: adminToken,
        AGENT_SESSIONS_RUNNER_TOKEN: runnerToken,
        AGENT_SESSIONS_IDLE_CHECK_MS: "1000",
        // The simulated runners claim 100,000 workspaces each (the server cuts a hello at this).
        AGENT_SESSIONS_RUNNER_MAX_CAPACITY: "100000",
      },
      stdio: ["ignore", "ignore", "pipe"],
    },
  );
  children.push(child);
  const url = await new Promise<string>((resolve, reject) => {
    let seen: string | undefined = "";
    child.stderr?.on("data", (chunk: Buffer) => {
      log.write(chunk);
      if (seen === undefined) return;
      seen += chunk.toString();
      const m = /agent-sessions server on (http:\/\/\S+?);/.exec(seen);
      if (m?.[1]) {
        seen = undefined;
        resolve(m[1]);
      }
    });
    child.once("exit", (code) => reject(new Error(`server exited (${code}); see ${dataDir}/server.log`)));
  });
  return { child, url };
}

type RunnerReply = { type: string; [key: string]: unknown };

type SimulatedRunner = { child: ChildProcess; ask(message: object, expect: string): Promise<RunnerReply> };

function startRunner(url: string, index: number): SimulatedRunner {
  const name = `simulated-${index}`;
  const log = createWriteStream(join(dataDir, `${name}.log`));
  const child = fork(join(here, "simulated-runner.ts"), [], {
    cwd: repoRoot,
    execArgv: profileFlags(name),
    env: {
      ...process.env,
      AGENT_SESSIONS_SERVER_URL: url,
      AGENT_SESSIONS_RUNNER_TOKEN: runnerToken,
      AGENT_SESSIONS_RUNNER_NAME: name,
      AGENT_SESSIONS_RUNNER_DATA_DIR: join(dataDir, name),
      // Room for all of them on each: placement spreads them evenly anyway.
      AGENT_SESSIONS_RUNNER_CAPACITY: String(SESSIONS),
    },
    stdio: ["ignore", "ignore", "pipe", "ipc"],
  });
  children.push(child);
  child.stderr?.pipe(log);
  const ask = (message: object, expect: string) =>
    new Promise<RunnerReply>((resolve, reject) => {
      const onMessage = (reply: RunnerReply) => {
        if (reply.type !== expect && reply.type !== "error") return;
        child.off("message", onMessage);
        if (reply.type === "error") reject(new Error(`simulated runner: ${String(reply.message)}`));
        else resolve(reply);
      };
      child.on("message", onMessage);
      child.send(message);
    });
  return { child, ask };
}

async function stopAll(): Promise<void> {
  for (const child of children.reverse()) {
    if (child.exitCode !== null || child.signalCode !== null) continue;
    const exited = new Promise((resolve) => child.once("exit", resolve));
    child.kill("SIGTERM");
    const timer = setTimeout(() => child.kill("SIGKILL"), 10_000);
    await exited;
    clearTimeout(timer);
  }
}

// ── API ───────────────────────────────────────────────────────────────────────────────────────

let baseUrl = "";

async function call(method: string, path: string, body?: unknown): Promise<{ status: number; text: string }> {
  const res = await fetch(`${baseUrl}${path}`, {
    method,
    headers: { authorization: `Bearer ${adminToken}`, "content-type": "application/json" },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  return { status: res.status, text: await res.text() };
}

async function must(method: string, path: string, body?: unknown): Promise<string> {
  const res = await call(method, path, body);
  if (res.status >= 300) throw new Error(`${method} ${path}: HTTP ${res.status} ${res.text.slice(0, 300)}`);
  return res.text;
}

type Status = { session_id: string; container_name: string; state: string };

/** GetAgentStatus of every session, page after page (1,000 per page, the most). */
async function allStatuses(): Promise<Status[]> {
  const all: Status[] = [];
  let token: string | undefined;
  do {
    const page = JSON.parse(
      await must("POST", "/v1/rpc/GetAgentStatus", {
        page_size: 1000,
        ...(token ? { page_token: token } : {}),
      }),
    ) as { sessions: Status[]; next_page_token?: string };
    all.push(...page.sessions);
    token = page.next_page_token;
  } while (token !== undefined);
  return all;
}

async function scrape(): Promise<string> {
  return must("GET", "/metrics");
}

function metric(text: string, name: string, labels = ""): number {
  const escaped = `${name}${labels}`.replace(/[{}"=]/g, (c) => `\\${c}`);
  const m = new RegExp(`^${escaped} (\\S+)$`, "m").exec(text);
  return m?.[1] === undefined ? Number.NaN : Number(m[1]);
}

// ── SSE subscribers (raw HTTP: one socket each) ───────────────────────────────────────────────

type Subscriber = { frames: number; close(): void };

/** Follows every session; `onData` gets each event's data line. Resolves once the response began. */
function subscribe(onData: (data: string, at: number) => void, sessionId?: string): Promise<Subscriber> {
  return new Promise((resolve, reject) => {
    const sub: Subscriber = { frames: 0, close: () => req.destroy() };
    const req = http.get(
      `${baseUrl}/v1/events${sessionId === undefined ? "" : `?session_id=${sessionId}`}`,
      { agent: false, headers: { authorization: `Bearer ${adminToken}`, accept: "text/event-stream" } },
      (res) => {
        if (res.statusCode !== 200) {
          reject(new Error(`GET /v1/events: HTTP ${res.statusCode}`));
          res.resume();
          return;
        }
        res.setEncoding("utf8");
        let tail = "";
        res.on("data", (chunk: string) => {
          const at = preciseNow();
          const text = tail + chunk;
          const end = text.lastIndexOf("\n");
          tail = text.slice(end + 1);
          for (const line of text.slice(0, end).split("\n"))
            if (line.startsWith("data: ")) {
              sub.frames++;
              onData(line.slice(6), at);
            }
        });
        res.on("error", () => undefined);
        resolve(sub);
      },
    );
    req.on("error", (error) => reject(error));
  });
}

/** `sent_at` of a benchmark frame's data line, without parsing the whole JSON. */
function sentAt(data: string): number | undefined {
  const i = data.indexOf('"sent_at":');
  if (i < 0) return undefined;
  return Number.parseFloat(data.slice(i + 10));
}

// ── phases ────────────────────────────────────────────────────────────────────────────────────

type Snapshot = {
  sessions: number;
  created: Created;
  rss: number;
  peak: number;
  sweepMeanMs: number;
  sweeps: number;
  statusP50: number;
  statusP99: number;
  statusBytes: number;
  statusWalkP50: number;
  scrapeMs: number;
};

const readyFrames = { count: 0 };

const pids = { server: 0, runners: [] as number[] };
type Created = { seconds: number; serverCpu: number; runnerCpu: number };

async function createSessions(from: number, to: number): Promise<Created> {
  const started = performance.now();
  const runnersCpu = () => pids.runners.reduce((sum, pid) => sum + cpuSecondsOf(pid), 0);
  const cpu0 = { server: cpuSecondsOf(pids.server), runner: runnersCpu() };
  const target = readyFrames.count + (to - from);
  let next = from;
  const putOne = async (i: number) => {
    const name = `s-${String(i).padStart(5, "0")}`;
    await must("PUT", `/v1/namespaces/${NS}/harnesssessions/${name}`, {
      apiVersion: API,
      kind: "HarnessSession",
      metadata: { name },
      spec: { agentRef: "bench", runtimeRef: "bench", desiredState: "running", idleTimeout: "1h" },
    });
  };
  const baseReady = readyFrames.count;
  let lastProgress = performance.now();
  let lastCount = readyFrames.count;
  let lastPrint = performance.now();
  while (readyFrames.count < target) {
    const inFlight = next - from - (readyFrames.count - baseReady);
    const batch: Promise<void>[] = [];
    for (let k = inFlight; k < WINDOW && next < to; k++) batch.push(putOne(next++));
    await Promise.all(batch);
    await sleep(batch.length === 0 ? 5 : 0);
    if (readyFrames.count !== lastCount) {
      lastCount = readyFrames.count;
      lastProgress = performance.now();
    } else if (performance.now() - lastProgress > 120_000)
      throw new Error(`no session became READY for 120 s (${readyFrames.count - baseReady} of ${to - from})`);
    if (performance.now() - lastPrint > 5_000) {
      lastPrint = performance.now();
      process.stderr.write(
        `  ${readyFrames.count} READY after ${((lastPrint - started) / 1000).toFixed(0)} s\n`,
      );
    }
  }
  return {
    seconds: (performance.now() - started) / 1000,
    serverCpu: cpuSecondsOf(pids.server) - cpu0.server,
    runnerCpu: runnersCpu() - cpu0.runner,
  };
}

/** Until the HarnessSessions gauge says `n` are Ready. */
async function waitHarnessReady(n: number): Promise<void> {
  const deadline = Date.now() + 300_000;
  for (;;) {
    const ready = metric(await scrape(), "agent_sessions_harness_sessions", '{phase="Ready"}');
    if (ready >= n) return;
    if (Date.now() > deadline) throw new Error(`only ${ready} of ${n} HarnessSessions Ready`);
    await sleep(1_000);
  }
}

async function measure(serverPid: number, sessions: number, created: Created): Promise<Snapshot> {
  await waitHarnessReady(sessions);
  const name = "agent_sessions_idle_sweep_duration_seconds";
  const before = await scrape();
  await sleep(11_000);
  const scrapeStarted = performance.now();
  const after = await scrape();
  const scrapeMs = performance.now() - scrapeStarted;
  const sweeps = metric(after, `${name}_count`) - metric(before, `${name}_count`);
  const sweepMeanMs = ((metric(after, `${name}_sum`) - metric(before, `${name}_sum`)) / sweeps) * 1000;
  // One page (the server's default size) per call, and every page walked.
  const times: number[] = [];
  const walks: number[] = [];
  let statusBytes = 0;
  for (let i = 0; i < CALLS; i++) {
    const t0 = performance.now();
    const text = await must("POST", "/v1/rpc/GetAgentStatus", {});
    times.push(performance.now() - t0);
    statusBytes = text.length;
    const w0 = performance.now();
    const count = (await allStatuses()).length;
    walks.push(performance.now() - w0);
    if (count !== sessions)
      throw new Error(`GetAgentStatus(all pages) returned ${count} sessions, expected ${sessions}`);
  }
  const sorted = sortedOf(times);
  const walkP50 = percentile(sortedOf(walks), 50);
  const { rss, peak } = memoryOf(serverPid);
  return {
    sessions,
    created,
    rss,
    peak,
    sweepMeanMs,
    sweeps,
    statusP50: percentile(sorted, 50),
    statusP99: percentile(sorted, 99),
    statusBytes,
    statusWalkP50: walkP50,
    scrapeMs,
  };
}

type FanOut = {
  subscribers: number;
  followed: string;
  connectMs: number;
  steady: { delivered: number; expected: number; p50: number; p99: number; perSecond: number };
  burst: {
    delivered: number;
    expected: number;
    p50: number;
    p99: number;
    perSecond: number;
    seconds: number;
  };
  rss: number;
  /** Server RSS growth right after connecting, per subscriber (nothing sent yet), KiB. */
  idleKibEach: number;
};

/**
 * `n` subscribers following every session (`emitting` undefined), or each following one of the
 * `emitting` sessions (subscriber i the (i mod k)-th): frame j goes to the (j mod k)-th session.
 */
async function fanOut(
  serverPid: number,
  n: number,
  emit: (count: number, perSecond: number) => Promise<RunnerReply>,
  emitting?: string[],
): Promise<FanOut> {
  let latencies: number[] = [];
  let lastAt = 0;
  const onData = (data: string, at: number) => {
    const sent = sentAt(data);
    if (sent === undefined) return;
    latencies.push(at - sent);
    lastAt = at;
  };
  const rss0 = memoryOf(serverPid).rss;
  const t0 = performance.now();
  const cpu0 = cpuSecondsOf(serverPid);
  const subs: Subscriber[] = [];
  for (let i = 0; i < n; i += 100)
    subs.push(
      ...(await Promise.all(
        Array.from({ length: Math.min(100, n - i) }, (_, k) =>
          subscribe(onData, emitting?.[(i + k) % emitting.length]),
        ),
      )),
    );
  // How many subscribers each frame reaches, by the emitting session it comes from.
  const reach = (count: number) => {
    if (!emitting) return count * n;
    let total = 0;
    for (let j = 0; j < count; j++) {
      const session = j % emitting.length;
      total += Math.floor(n / emitting.length) + (session < n % emitting.length ? 1 : 0);
    }
    return total;
  };
  const connectMs = performance.now() - t0;
  const idleKibEach = ((memoryOf(serverPid).rss - rss0) * 1024) / n;
  if (process.env.SCALE_BENCH_DEBUG)
    process.stderr.write(
      `  connected ${n} in ${connectMs.toFixed(0)} ms; server CPU ${(cpuSecondsOf(serverPid) - cpu0).toFixed(1)} s\n`,
    );
  try {
    // Barrier: every subscriber has seen a frame (so each is subscribed on the bus).
    for (let tries = 0; ; tries++) {
      for (const s of subs) s.frames = 0;
      await emit(emitting ? emitting.length : 1, 100_000);
      const until = Date.now() + 5_000;
      while (subs.some((s) => s.frames === 0) && Date.now() < until) await sleep(20);
      if (subs.every((s) => s.frames > 0)) break;
      if (tries > 5) throw new Error("subscribers never all received a frame");
    }
    await sleep(500);

    const run = async (count: number, perSecond: number) => {
      latencies = [];
      const started = preciseNow();
      await emit(count, perSecond);
      const expected = reach(count);
      const until = Date.now() + 120_000;
      while (latencies.length < expected && Date.now() < until) await sleep(10);
      const sorted = sortedOf(latencies);
      const seconds = (lastAt - started) / 1000;
      return {
        delivered: latencies.length,
        expected,
        p50: percentile(sorted, 50),
        p99: percentile(sorted, 99),
        perSecond: latencies.length / seconds,
        seconds,
      };
    };
    const steady = await run(STEADY_RATE * STEADY_SECONDS, STEADY_RATE);
    await sleep(500);
    const burst = await run(BURST_FRAMES, 1_000_000);
    return {
      subscribers: n,
      followed: emitting ? `one of ${emitting.length} sessions each` : "every session",
      connectMs,
      steady,
      burst,
      rss: memoryOf(serverPid).rss,
      idleKibEach,
    };
  } finally {
    for (const s of subs) s.close();
    await sleep(1_000);
  }
}

// ── main ──────────────────────────────────────────────────────────────────────────────────────

async function main(): Promise<void> {
  const limit = openFileLimit();
  if (limit < SUBSCRIBERS + 1_000)
    throw new Error(
      `open-file limit ${limit} is too low for ${SUBSCRIBERS} subscribers: run \`ulimit -n ${SUBSCRIBERS * 2 + 2_000}\` first`,
    );
  const server = await startServer();
  baseUrl = server.url;
  const serverPid = server.child.pid ?? 0;
  const runners = Array.from({ length: RUNNERS }, (_, i) => startRunner(server.url, i));
  pids.server = serverPid;
  pids.runners = runners.map((r) => r.child.pid ?? 0);
  for (const runner of runners)
    for (let i = 0; ; i++) {
      const status = await runner
        .ask({ type: "status" }, "status")
        .catch(() => ({ type: "status", attached: false }));
      if (status.attached) break;
      if (i > 600) throw new Error("a simulated runner never attached");
      await sleep(100);
    }
  const runner = runners[0] as SimulatedRunner;
  const idle = memoryOf(serverPid);
  await must("PUT", `/v1/namespaces/${NS}/agentruntimes/bench`, {
    apiVersion: API,
    kind: "AgentRuntime",
    metadata: { name: "bench" },
    spec: {
      image: `127.0.0.1:5000/agent-sessions/simulated@sha256:${"0".repeat(63)}1`,
      contract: "v1alpha2",
      capabilities: ["streaming"],
      approved: true,
    },
  });
  await must("PUT", `/v1/namespaces/${NS}/agents/bench`, {
    apiVersion: API,
    kind: "Agent",
    metadata: { name: "bench" },
    spec: { runtimeRef: "bench" },
  });

  // One follower counts READY status frames: the creation clock.
  const progress = await subscribe((data) => {
    if (data.includes('"type":"status"') && data.includes('"state":"READY"')) readyFrames.count++;
  });

  process.stderr.write(`creating ${BASELINE_SESSIONS} HarnessSessions…\n`);
  const baseline = await measure(serverPid, BASELINE_SESSIONS, await createSessions(0, BASELINE_SESSIONS));
  process.stderr.write(`creating ${SESSIONS - BASELINE_SESSIONS} more…\n`);
  const full = await measure(serverPid, SESSIONS, await createSessions(BASELINE_SESSIONS, SESSIONS));
  progress.close();

  const emit = (count: number, perSecond: number) =>
    runner.ask({ type: "emit", count, sessions: EMITTING_SESSIONS, perSecond }, "emitted");
  // The sessions of the workspaces whose agents emit, for subscribers following one session.
  const containers = (await runner.ask({ type: "emitting", sessions: EMITTING_SESSIONS }, "emitting"))
    .containers as string[];
  const statuses = { sessions: await allStatuses() };
  const sessionOf = new Map(
    statuses.sessions.filter((x) => x.state === "READY").map((x) => [x.container_name, x.session_id]),
  );
  const emitting = containers.map((c) => {
    const id = sessionOf.get(c);
    if (id === undefined) throw new Error(`no READY session in ${c}`);
    return id;
  });
  process.stderr.write("fan-out to 1 subscriber…\n");
  const one = await fanOut(serverPid, 1, emit);
  process.stderr.write(`fan-out to ${SUBSCRIBERS} subscribers…\n`);
  const many = await fanOut(serverPid, SUBSCRIBERS, emit);
  process.stderr.write(`fan-out to ${SUBSCRIBERS} subscribers, each following one session…\n`);
  const perSession = await fanOut(serverPid, SUBSCRIBERS, emit, emitting);
  const fans = [one, many, perSession];

  const f1 = (v: number) => v.toFixed(1);
  const f0 = (v: number) => Math.round(v).toLocaleString("en-US");
  const rows: string[][] = [
    ["sessions (HarnessSessions → agent sessions READY)", f0(baseline.sessions), f0(full.sessions)],
    [
      "create throughput (sessions/s)",
      f1(baseline.sessions / baseline.created.seconds),
      f1((full.sessions - baseline.sessions) / full.created.seconds),
    ],
    [
      `CPU per created session, server / ${RUNNERS} runners (ms)`,
      `${f1((baseline.created.serverCpu * 1000) / baseline.sessions)} / ${f1((baseline.created.runnerCpu * 1000) / baseline.sessions)}`,
      `${f1((full.created.serverCpu * 1000) / (full.sessions - baseline.sessions))} / ${f1((full.created.runnerCpu * 1000) / (full.sessions - baseline.sessions))}`,
    ],
    ["server RSS (MiB; before any session: " + f1(idle.rss) + ")", f1(baseline.rss), f1(full.rss)],
    ["server peak RSS VmHWM (MiB)", f1(baseline.peak), f1(full.peak)],
    [`idle sweep, mean of ${full.sweeps} (ms)`, f1(baseline.sweepMeanMs), f1(full.sweepMeanMs)],
    [`GetAgentStatus(all) first page p50 (ms, ${CALLS} calls)`, f1(baseline.statusP50), f1(full.statusP50)],
    ["GetAgentStatus(all) first page p99 (ms)", f1(baseline.statusP99), f1(full.statusP99)],
    ["GetAgentStatus(all) first page (KiB)", f1(baseline.statusBytes / 1024), f1(full.statusBytes / 1024)],
    ["GetAgentStatus every page of 1000, p50 (ms)", f1(baseline.statusWalkP50), f1(full.statusWalkP50)],
    ["GET /metrics, one scrape (ms)", f1(baseline.scrapeMs), f1(full.scrapeMs)],
  ];
  const each = (f: (x: FanOut) => string) => fans.map(f);
  const sse: string[][] = [
    ["subscribers", ...each((x) => f0(x.subscribers))],
    ["each follows", ...each((x) => x.followed)],
    ["connect all (ms)", ...each((x) => f1(x.connectMs))],
    [
      `steady ${STEADY_RATE} frames/s: delivered / expected`,
      ...each((x) => `${f0(x.steady.delivered)} / ${f0(x.steady.expected)}`),
    ],
    ["steady: latency p50 (ms)", ...each((x) => f1(x.steady.p50))],
    ["steady: latency p99 (ms)", ...each((x) => f1(x.steady.p99))],
    [
      `burst ${BURST_FRAMES} frames: delivered / expected`,
      ...each((x) => `${f0(x.burst.delivered)} / ${f0(x.burst.expected)}`),
    ],
    ["burst: throughput (frames delivered/s, in all)", ...each((x) => f0(x.burst.perSecond))],
    ["burst: drained in (s)", ...each((x) => f1(x.burst.seconds))],
    ["burst: latency p50 (ms)", ...each((x) => f1(x.burst.p50))],
    ["burst: latency p99 (ms)", ...each((x) => f1(x.burst.p99))],
    ["server RSS with the subscribers (MiB)", ...each((x) => f1(x.rss))],
    ["server RSS per idle subscriber, on connect (KiB)", ...each((x) => f1(x.idleKibEach))],
  ];
  const table = (title: string, head: string[], body: string[][]) => {
    const w = Math.max(...body.map((r) => (r[0] ?? "").length));
    const widths = head.map((h, i) => Math.max(h.length, ...body.map((r) => (r[i + 1] ?? "").length)));
    const line = (k: string, cells: string[]) =>
      `  ${k.padEnd(w)}${cells.map((c, i) => `  ${c.padStart(widths[i] ?? 0)}`).join("")}`;
    console.log(`\n${title}`);
    console.log(line("", head));
    for (const [k, ...cells] of body) console.log(line(k ?? "", cells));
  };
  console.log(
    `\nscale benchmark: node ${process.version}, ${SESSIONS} sessions, ${SUBSCRIBERS} subscribers, ` +
      `store ${process.env.AGENT_SESSIONS_DATABASE_URL ? "PostgreSQL" : "SQLite"}, data in ${dataDir}`,
  );
  table("sessions", ["baseline", "full"], rows);
  table(
    `SSE fan-out (${EMITTING_SESSIONS} sessions emit, round-robin; ${SESSIONS} tracked)`,
    ["baseline", "all", "per session"],
    sse,
  );
}

void main()
  .then(
    () => 0,
    (error: unknown) => {
      process.stderr.write(
        `scale benchmark failed: ${error instanceof Error ? error.stack : String(error)}\n`,
      );
      process.stderr.write(`logs in ${dataDir}\n`);
      return 1;
    },
  )
  .then(async (code) => {
    await stopAll();
    if (code === 0 && !process.env.SCALE_BENCH_KEEP) rmSync(dataDir, { recursive: true, force: true });
    process.exit(code);
  });
