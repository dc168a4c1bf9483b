/**
 * The whole system as real processes: `agent-sessions serve --no-runner` and a separate
 * `agent-sessions runner` over the real WebSocket, real dockerd, real Pulumi, and the loopback
 * model server on our bridge (sessions reach it through their gateway). Used by end-to-end tests.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startModelServer } from "../fixtures/model-server.ts";
import {
  builtImage,
  DOCKER_BRIDGE_IP,
  referenceImage,
  repoRoot,
  sessionHostAddress,
  sessionHostPorts,
  testbedHome,
} from "./testbed.ts";
import { trackProcessLog } from "./process-logs.ts";
import { type SseEvent, sseEvents } from "./sse.ts";
import { until as untilValue } from "./until.ts";

/** A parsed JSON body; tests read into it freely. */
// biome-ignore lint/suspicious/noExplicitAny: JSON bodies of many shapes, read by assertions
export type Json = any;

export const BRIDGE_IP = DOCKER_BRIDGE_IP;

/**
 * The test model server where sessions of `engine` reach it (sessionHostAddress): the Docker
 * bridge, any port; on the 1.35 cluster the link's host address, a free port of the guard's range.
 */
export async function startSessionModelServer(engine: "docker" | "kubernetes") {
  const host = sessionHostAddress(engine);
  let last: unknown;
  for (const port of sessionHostPorts(engine)) {
    try {
      return await startModelServer(host, port);
    } catch (error) {
      if ((error as { code?: string }).code !== "EADDRINUSE") throw error;
      last = error;
    }
  }
  throw new Error(`no free model-server port on ${host}: ${String(last)}`);
}
const cli = join(repoRoot, "bin", "agent-sessions");

export type Proc = { child: ChildProcess; logs: string[]; exited: Promise<number | null> };

export function launch(
  args: string[],
  env: Record<string, string>,
  ready: RegExp,
  command = cli,
): Promise<Proc & { match: RegExpMatchArray }> {
  const child = spawn(command, args, { env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe"] });
  const logs: string[] = [];
  trackProcessLog(args[0] ?? command, child.pid, logs);
  const exited = new Promise<number | null>((r) => child.once("exit", (code) => r(code)));
  return new Promise((resolve, reject) => {
    const timer = setTimeout(
      () => reject(new Error(`${args[0]} did not start: ${logs.join("").slice(-2000)}`)),
      60_000,
    );
    const onData = (d: Buffer) => {
      logs.push(d.toString());
      const m = logs.join("").match(ready);
      if (m) {
        clearTimeout(timer);
        resolve({ child, logs, exited, match: m });
      }
    };
    child.stdout?.on("data", onData);
    child.stderr?.on("data", onData);
    void exited.then((code) => {
      clearTimeout(timer);
      reject(new Error(`${args[0]} exited ${code}: ${logs.join("").slice(-2000)}`));
    });
  });
}

/** A failed test's report: the tails of a system's server and runner logs, on stderr. */
export function writeLogTails(system: Pick<System, "server" | "runner"> | undefined): void {
  for (const which of ["server", "runner"] as const)
    process.stderr.write(
      `--- ${which} log (tail) ---\n${(system?.[which]?.logs ?? []).join("").slice(-6_000)}\n`,
    );
}

/** The engine a runner's arguments name (`--engine kubernetes`); docker, the runner's default, else. */
function engineOf(args: string[]): "docker" | "kubernetes" {
  const i = args.indexOf("--engine");
  return (i >= 0 && args[i + 1] === "kubernetes") || args.includes("--engine=kubernetes")
    ? "kubernetes"
    : "docker";
}

/** The first of `ports` on `host` nothing listens on now (it is listened on, then closed). */
async function freePort(host: string, ports: number[]): Promise<number> {
  for (const port of ports) {
    const free = await new Promise<boolean>((resolve) => {
      const probe = createServer();
      probe.once("error", () => resolve(false));
      probe.listen(port, host, () => probe.close(() => resolve(true)));
    });
    if (free) return port;
  }
  throw new Error(`no free port on ${host} among ${ports[0]}…${ports.at(-1)}`);
}

export class System {
  readonly dataDir: string;
  server: Proc | undefined;
  runner: Proc | undefined;
  url = "";
  adminToken = "";
  runnerToken = "";
  port = 0;
  /** Environment of both processes on top of the defaults (e.g. a shorter reattach window). */
  readonly extraEnv: Record<string, string>;
  /** The CLI server and runner run: this checkout's, or another's (a benchmark's baseline). */
  readonly cli: string;

  constructor(
    dataDir = mkdtempSync(join(tmpdir(), "as-system-")),
    extraEnv: Record<string, string> = {},
    checkout?: string,
  ) {
    this.dataDir = dataDir;
    this.extraEnv = extraEnv;
    this.cli = checkout === undefined ? cli : join(checkout, "bin", "agent-sessions");
  }

  /** `engine`: the runner these variables start (its model gateway listens where its sessions see the host). */
  env(engine: "docker" | "kubernetes" = "docker"): Record<string, string> {
    const pi = join(testbedHome, "state", "pi-image.json");
    const compass = join(testbedHome, "state", "compass-image.json");
    const hermes = join(testbedHome, "state", "hermes-image.json");
    return {
      AGENT_SESSIONS_REFERENCE_IMAGE: referenceImage().image,
      // `serve` registers default/pi when the test bed built its image (the default parts do).
      ...(existsSync(pi) ? { AGENT_SESSIONS_PI_IMAGE: builtImage("pi-image").image } : {}),
      ...(existsSync(compass) ? { AGENT_SESSIONS_COMPASS_IMAGE: builtImage("compass-image").image } : {}),
      ...(existsSync(hermes) ? { AGENT_SESSIONS_HERMES_IMAGE: builtImage("hermes-image").image } : {}),
      AGENT_SESSIONS_REATTACH_WINDOW_MS: process.env.AGENT_SESSIONS_REATTACH_WINDOW_MS ?? "20000",
      // 2 missed heartbeats = lost link: 5 s, long enough for a loaded 2-core CI machine.
      AGENT_SESSIONS_HEARTBEAT_MS: "2500",
      // The variables Agents in the engine tests name in secretRef; the server offers no other.
      AGENT_SESSIONS_CREDENTIAL_ENV: "E2E_MODEL_KEY,E2E_UI_MODEL_KEY,BENCH_MODEL_KEY",
      // What the operator lets sessions reach (nothing by default): the host services the engine
      // tests start where sessions see the host (the model and git servers, on unprivileged ports).
      AGENT_SESSIONS_EGRESS_ALLOW: [
        ...new Set([sessionHostAddress("docker"), sessionHostAddress("kubernetes")]),
      ]
        .map((host) => `${host}/32:1024-65535`)
        .join(","),
      // The runner's model gateway where its sessions reach this machine: the Docker bridge (any
      // port), or the cluster's link, whose host guard admits a port range only.
      AGENT_SESSIONS_GATEWAY_ADDRESS:
        engine === "docker" ? `${sessionHostAddress("docker")}:0` : (this.#kubernetesGateway ?? ""),
      ...this.extraEnv,
    };
  }

  /** The Kubernetes runners' gateway address: a port of the link guard's range free when first asked. */
  #kubernetesGateway: string | undefined;

  /** The variables of a runner of `engine`, its gateway address chosen first on Kubernetes. */
  async #runnerEnv(engine: "docker" | "kubernetes"): Promise<Record<string, string>> {
    if (engine === "kubernetes" && this.#kubernetesGateway === undefined) {
      // From the top of the range down: the tests' model servers take it from the bottom up.
      const host = sessionHostAddress("kubernetes");
      const port = await freePort(host, [...sessionHostPorts("kubernetes")].reverse());
      this.#kubernetesGateway = `${host}:${port}`;
    }
    return { ...this.env(engine), AGENT_SESSIONS_RUNNER_TOKEN: this.runnerToken };
  }

  async startServer(): Promise<void> {
    await this.#serve(["--no-runner"], /"url":"(http:\/\/[^"]+)"/);
  }

  /**
   * `agent-sessions serve` with its embedded runner (server and runner in one process: the
   * default a new user runs; its runner's data dir is `<dataDir>/server/runner`). Resolves once the
   * server listens, or with `waitForRunner` once the embedded runner attached too.
   */
  async startEmbedded(options: { waitForRunner: boolean } = { waitForRunner: true }): Promise<void> {
    await this.#serve(
      [],
      options.waitForRunner ? /"url":"(http:\/\/[^"]+)"[\s\S]*runner attached/ : /"url":"(http:\/\/[^"]+)"/,
    );
  }

  async #serve(args: string[], ready: RegExp): Promise<void> {
    const s = await launch(
      ["serve", ...args, "--port", String(this.port), "--data-dir", join(this.dataDir, "server")],
      this.env(),
      ready,
      this.cli,
    );
    this.server = s;
    this.url = s.match[1] ?? "";
    this.port = Number(new URL(this.url).port);
    this.adminToken = readFileSync(join(this.dataDir, "server", "admin-token"), "utf8").trim();
    this.runnerToken = readFileSync(join(this.dataDir, "server", "runner-token"), "utf8").trim();
  }

  /** `extraArgs`: e.g. `["--engine", "kubernetes"]` (the runner's default engine is docker). */
  async startRunner(extraArgs: string[] = []): Promise<void> {
    this.runner = await launch(
      [
        "runner",
        "--server",
        this.url,
        "--data-dir",
        join(this.dataDir, "runner"),
        "--name",
        "e2e",
        ...extraArgs,
      ],
      await this.#runnerEnv(engineOf(extraArgs)),
      /runner attached/,
      this.cli,
    );
  }

  /**
   * One more runner process, apart from `runner` (several-runner tests): its own `--name` and data
   * dir (`runner-<name>`), `extraArgs` such as `--capacity 2 --label zone=a`. The caller stops it.
   */
  async launchRunner(name: string, extraArgs: string[] = []): Promise<Proc> {
    return launch(
      [
        "runner",
        "--server",
        this.url,
        "--data-dir",
        join(this.dataDir, `runner-${name}`),
        "--name",
        name,
        ...extraArgs,
      ],
      await this.#runnerEnv(engineOf(extraArgs)),
      /runner attached/,
    );
  }

  async kill(which: "server" | "runner", signal: NodeJS.Signals = "SIGKILL"): Promise<void> {
    const p = this[which];
    if (!p) return;
    p.child.kill(signal);
    await p.exited;
    this[which] = undefined;
  }

  async stop(): Promise<void> {
    await this.kill("runner", "SIGTERM");
    await this.kill("server", "SIGTERM");
  }

  /**
   * `agent-sessions ARGS…` as a user runs it beside this system (its environment, `--data-dir` is
   * the caller's to pass), to the end: exit code and output.
   */
  runCli(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
    const child = spawn(cli, args, {
      env: { ...process.env, ...this.env() },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d: Buffer) => {
      stdout += d.toString();
    });
    child.stderr.on("data", (d: Buffer) => {
      stderr += d.toString();
    });
    return new Promise((resolve, reject) => {
      child.once("error", reject);
      child.once("close", (code) => resolve({ code, stdout, stderr }));
    });
  }

  call(method: string, path: string, body?: unknown, token = this.adminToken): Promise<ApiReply> {
    return callApi(this.url, token, method, path, body);
  }

  rpc(method: string, body: unknown, token?: string) {
    return this.call("POST", `/v1/rpc/${method}`, body, token);
  }
}

export type ApiReply = { status: number; body: Json };

/** One HTTP API call as a client makes it: bearer token, JSON in, JSON (or text) out. */
export async function callApi(
  url: string,
  token: string,
  method: string,
  path: string,
  body?: unknown,
): Promise<ApiReply> {
  const res = await fetch(`${url}${path}`, {
    method,
    headers: {
      authorization: `Bearer ${token}`,
      ...(body !== undefined ? { "content-type": "application/json" } : {}),
    },
    ...(body !== undefined ? { body: typeof body === "string" ? body : JSON.stringify(body) } : {}),
  });
  const text = await res.text();
  let parsed: unknown = text;
  try {
    parsed = JSON.parse(text);
  } catch {
    // not JSON: keep the text
  }
  return { status: res.status, body: parsed };
}

export type { SseEvent };

/** Follows `/v1/events` and collects events until closed. */
export function followEvents(system: System, query = "", lastEventId?: string) {
  const events: SseEvent[] = [];
  const controller = new AbortController();
  const done = (async () => {
    const res = await fetch(`${system.url}/v1/events${query}`, {
      headers: {
        authorization: `Bearer ${system.adminToken}`,
        ...(lastEventId ? { "last-event-id": lastEventId } : {}),
      },
      signal: controller.signal,
    });
    if (!res.body) return;
    for await (const event of sseEvents(res.body)) events.push(event);
  })().catch(() => undefined);
  return {
    events,
    close: async () => {
      controller.abort();
      await done;
    },
  };
}

/** `until` (./until.ts) for a truthy value, retrying a probe that threw; 60 s by default. */
export function until<T>(
  what: string,
  fn: () => T | Promise<T>,
  timeoutMs = 60_000,
): Promise<NonNullable<T>> {
  return untilValue(
    what,
    async () => {
      const value = await fn();
      return value ? (value as NonNullable<T>) : undefined;
    },
    timeoutMs,
    { intervalMs: 100, retryErrors: true },
  );
}
