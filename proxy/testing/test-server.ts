import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach } from "vitest";
import { defaultSettings, type ServerConfig } from "../config.ts";
import { TEST_EGRESS_ALLOW } from "./test-admission.ts";
import { type Logger, silentLogger } from "../observability/log.ts";
import { type RunningServer, startServer } from "../main.ts";
import { EventBus } from "../lifecycle/event-bus.ts";
import { SessionJournal } from "../lifecycle/session-journal.ts";
import { RunnerHub, type RunnerHubOptions } from "../runners/runner-hub.ts";
import type { Store } from "../store/store.ts";
import { FakeRunner, type FakeRunnerOptions } from "./fake-runner.ts";
import { SseClient } from "./sse-client.ts";

export const ADMIN_TOKEN = "admin-token-for-tests-0123456789";
export const RUNNER_TOKEN = "runner-token-for-tests-0123456789";
/** Unit tests never pull it: any well-formed digest pin will do. */
/**
 * A RunnerHub alone over `store` (no HTTP app around it): the test tokens, the default settings,
 * open registration; `options` on top.
 */
export function bareHub(store: Store, options: Partial<RunnerHubOptions> = {}): RunnerHub {
  return new RunnerHub({
    store,
    journal: new SessionJournal(store, new EventBus()),
    adminToken: ADMIN_TOKEN,
    runnerToken: RUNNER_TOKEN,
    ...defaultSettings(),
    registration: "open",
    ...options,
  });
}

export const TEST_IMAGE = `127.0.0.1:5000/agent-sessions/reference@sha256:${"a".repeat(64)}`;

export type TestServer = {
  server: RunningServer;
  dataDir: string;
  /** One JSON request to the server's API with the admin token (or `token`); the reply's status and JSON body. */
  call(
    method: string,
    path: string,
    body?: unknown,
    token?: string,
    // biome-ignore lint/suspicious/noExplicitAny: JSON bodies of many shapes, read by assertions
  ): Promise<{ status: number; body: any }>;
  rpc(
    method: string,
    body: unknown,
    token?: string,
  ): Promise<{ status: number; body: Record<string, unknown> }>;
  put(path: string, body: unknown): Promise<{ status: number; body: Record<string, unknown> }>;
  events(query?: string, lastEventId?: string): Promise<SseClient>;
  /**
   * A fake runner, dialing like the real one: with the credential this data dir's server issued
   * its name before (kept across restarts of the test server), else with the runner token.
   */
  runner(options?: FakeRunnerOptions): Promise<FakeRunner>;
  /** Stop the server, keep the data directory (restart tests). */
  stop(): Promise<void>;
  /** Stop and delete everything. */
  close(): Promise<void>;
};

/** Credentials issued to fake runners, by data dir and runner name (a runner's credential file). */
const issued = new Map<string, string>();

/** A real server on port 0 with a fresh data directory, the reference runtime and one Agent `alice`. */
export async function startTestServer(
  overrides: Partial<ServerConfig> = {},
  options: {
    agent?: boolean;
    log?: Logger;
    /** The environment offered to sessions (`secretRef` credentials). @default the variables of process.env `overrides.credentialEnv` lists */
    secretEnv?: Record<string, string | undefined>;
  } = {},
): Promise<TestServer> {
  const dataDir = overrides.dataDir ?? mkdtempSync(join(tmpdir(), "agent-sessions-proxy-"));
  const config: ServerConfig = {
    ...defaultSettings(),
    port: 0,
    host: "127.0.0.1",
    dataDir,
    adminToken: ADMIN_TOKEN,
    runnerToken: RUNNER_TOKEN,
    // What the operator allows sessions to reach (nothing by default): the private range the
    // tests' Agents name (the test bed's bridge 10.213.0.1 among them).
    egressAllow: [...TEST_EGRESS_ALLOW],
    heartbeatMs: 1_000,
    reattachWindowMs: 5_000,
    frameBufferSize: 1_000,
    commandTimeoutMs: 5_000,
    shippedImages: { reference: TEST_IMAGE },
    ...overrides,
  };
  const server = await startServer(config, {
    log: options.log ?? silentLogger,
    keepAliveMs: 200,
    ...(options.secretEnv ? { secretEnv: options.secretEnv } : {}),
  });
  const clients: SseClient[] = [];
  const runners: FakeRunner[] = [];
  const call = async (method: string, path: string, body: unknown, token = ADMIN_TOKEN) => {
    const response = await fetch(`${server.url}${path}`, {
      method,
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
      ...(body !== undefined ? { body: typeof body === "string" ? body : JSON.stringify(body) } : {}),
    });
    return { status: response.status, body: (await response.json()) as Record<string, unknown> };
  };
  const t: TestServer = {
    server,
    dataDir,
    call: (method, path, body, token) => call(method, path, body, token),
    rpc: (method, body, token) => call("POST", `/v1/rpc/${method}`, body, token),
    put: (path, body) => call("PUT", path, body),
    events: async (query = "", lastEventId) => {
      const headers: Record<string, string> = { authorization: `Bearer ${ADMIN_TOKEN}` };
      if (lastEventId !== undefined) headers["last-event-id"] = lastEventId;
      const client = await SseClient.open(`${server.url}/v1/events${query}`, headers);
      clients.push(client);
      return client;
    },
    runner: async (runnerOptions) => {
      const key = `${dataDir}\0${runnerOptions?.name ?? "fake"}`;
      const runner = await FakeRunner.connect(
        server.runnerUrl,
        issued.get(key) ?? RUNNER_TOKEN,
        runnerOptions,
      );
      if (runner.issuedCredential) issued.set(key, runner.issuedCredential);
      runners.push(runner);
      return runner;
    },
    stop: async () => {
      for (const c of clients) c.close();
      for (const r of runners) r.kill();
      await server.close();
    },
    close: async () => {
      await t.stop();
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
  if (options.agent !== false) {
    const agent = await t.put("/v1/namespaces/default/agents/alice", {
      apiVersion: "agent-sessions.dev/v1alpha1",
      kind: "Agent",
      metadata: { name: "alice" },
      spec: {
        runtimeRef: "reference",
        credentials: [{ name: "OPENAI_API_KEY", value: "sk-test" }],
        model: { baseUrl: "http://10.213.0.1:11434/v1", name: "tiny" },
        egress: [{ cidr: "10.213.0.1/32", port: 11434 }],
      },
    });
    if (agent.status !== 201) throw new Error(`creating Agent alice failed: ${JSON.stringify(agent.body)}`);
  }
  return t;
}

/**
 * A test server made before each test of the calling file and closed after it:
 * `const t = serverPerTest();` then `t().call(…)` inside a test.
 */
export function serverPerTest(...args: Parameters<typeof startTestServer>): () => TestServer {
  let current: TestServer | undefined;
  beforeEach(async () => {
    current = await startTestServer(...args);
  });
  afterEach(async () => {
    await current?.close();
    current = undefined;
  });
  return () => {
    if (!current) throw new Error("the test server exists only while a test runs");
    return current;
  };
}
