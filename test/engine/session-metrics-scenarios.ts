/**
 * Per-session metrics (issue 40) on one engine, real parts only: a server and a runner over the
 * real WebSocket, the engine and the reference runtime. What a user checks with `GET
 * …/harnesssessions/{name}/metrics`: the limits the session was given; CPU rising under a busy loop
 * in the session; memory rising under an allocation; the volume's bytes rising with a file; a chat
 * token of the session may read them, one of another session may not; a stopped session is a 412
 * naming its phase, an unknown one a 404. With `AGENT_SESSIONS_SESSION_SERIES_MS` set, `GET /metrics`
 * carries each Ready session's series under its namespace and name, and drops a stopped one's.
 */
import { randomBytes } from "node:crypto";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { modelAgent } from "../fixtures/agent-manifest.ts";
import type { ModelServer } from "../fixtures/model-server.ts";
import { dockerProbe, type EngineProbe, kubernetesProbe } from "../support/engine-probes.ts";
import { type Json, System, startSessionModelServer, until, writeLogTails } from "../support/system.ts";

export type MetricsScenarioOptions = {
  engine: "docker" | "kubernetes";
  /** Appended to every session name: the cluster is shared by test files. */
  suffix?: string;
};

const NS = "/v1/namespaces/default";
const SESSIONS = `${NS}/harnesssessions`;
const READY_MS = 300_000;
const MiB = 1024 * 1024;

export function sessionMetricsScenarios(options: MetricsScenarioOptions): void {
  const n = (name: string) => `${name}${options.suffix ?? ""}`;
  let system: System;
  let model: ModelServer;
  let probe: EngineProbe;
  const call = (method: string, path: string, body?: unknown, token?: string) =>
    system.call(method, path, body, token);
  const metrics = async (name: string, token?: string) =>
    call("GET", `${SESSIONS}/${name}/metrics`, undefined, token);

  async function readySession(name: string): Promise<Json> {
    const put = await call("PUT", `${SESSIONS}/${name}`, {
      apiVersion: "agent-sessions.dev/v1alpha1",
      kind: "HarnessSession",
      metadata: { name },
      spec: { agentRef: "assistant", runtimeRef: "reference" },
    });
    expect([200, 201], JSON.stringify(put.body)).toContain(put.status); // 200: a retry's
    return phase(name, "Ready");
  }

  async function phase(name: string, wanted: string): Promise<Json> {
    return until(
      `${name} ${wanted}`,
      async () => {
        const s = await call("GET", `${SESSIONS}/${name}`);
        if (s.body.status?.phase === wanted) return s.body;
        throw new Error(`phase ${s.body.status?.phase}`);
      },
      READY_MS,
    );
  }

  async function scrape(): Promise<string> {
    const res = await fetch(`${system.url}/metrics`, {
      headers: { authorization: `Bearer ${system.adminToken}` },
    });
    expect(res.status).toBe(200);
    return res.text();
  }

  async function chatToken(name: string): Promise<string> {
    const t = await call("POST", "/v1/tokens", {
      name: `m-${name}-${randomBytes(3).toString("hex")}`,
      scopes: [`session:default/${name}:chat`],
    });
    expect(t.status, JSON.stringify(t.body)).toBe(201);
    return t.body.token as string;
  }

  beforeAll(async () => {
    model = await startSessionModelServer(options.engine);
    process.env.E2E_MODEL_KEY = `sk-e2e-${randomBytes(12).toString("hex")}`;
    probe = options.engine === "docker" ? dockerProbe() : await kubernetesProbe();
    // Per-session Prometheus series on, sampled every 2 s (off by default).
    system = new System(undefined, { AGENT_SESSIONS_SESSION_SERIES_MS: "2000" });
    await system.startServer();
    await system.startRunner(["--engine", options.engine]);
    const put = await call("PUT", `${NS}/agents/assistant`, modelAgent("assistant", model));
    expect(put.status, JSON.stringify(put.body)).toBe(201);
  }, 120_000);

  afterEach((context) => {
    if (context.task.result?.state === "fail") writeLogTails(system);
  });

  afterAll(async () => {
    for (const s of ["measured", "other"])
      await system?.call("DELETE", `${SESSIONS}/${n(s)}`).catch(() => undefined);
    await system?.stop();
    await model?.close();
  });

  describe(`session metrics (${options.engine})`, () => {
    it("show the limits, CPU under a busy loop, memory under an allocation, the volume's bytes", async () => {
      const name = n("measured");
      const session = await readySession(name);
      const workload = session.status.containerName as string;
      // Its first answer: a startup CPU boost (Docker, runner/docker/startup-boost.ts) ends with it.
      const answered = await call("POST", `${SESSIONS}/${name}/requests`, { input: "hello" });
      expect(answered.status, JSON.stringify(answered.body)).toBe(200);
      const idle = await until(
        "the declared CPU limit after the first answer",
        async () => {
          const got = await metrics(name);
          return got.status !== 200 || got.body.metrics.cpu.limitCores === 0.5 ? got : undefined;
        },
        30_000,
      );
      expect(idle.status, JSON.stringify(idle.body)).toBe(200);
      expect(idle.body).toMatchObject({ namespace: "default", name, phase: "Ready", engine: options.engine });
      const m = idle.body.metrics;
      // The session's declared resources (500m, 512 MiB by default) as the engine enforces them.
      expect(m.cpu.limitCores).toBe(0.5);
      expect(m.memory.limitBytes).toBe(512 * MiB);
      expect(m.cpu.windowMs).toBeGreaterThanOrEqual(500);
      expect(m.memory.bytes).toBeGreaterThan(MiB);
      expect(Date.parse(m.since)).toBeLessThanOrEqual(Date.parse(m.sampledAt));
      expect(m.network.rxBytes + m.network.txBytes).toBeGreaterThan(0); // the adapter's probes
      expect(m.volume.usedBytes).toBeGreaterThanOrEqual(0);

      // A busy loop in the session for 20 s (an exec takes a moment to start): a sample sees the
      // CPU rise, bounded by the limit (0.5 cores; less on a machine busy with other work).
      const busy = probe
        .exec(workload, ["node", "-e", "const end = Date.now() + 20000; while (Date.now() < end) {}"])
        .catch(() => undefined);
      const loaded = await until(
        "the busy loop in the metrics",
        async () => {
          const now = (await metrics(name)).body.metrics;
          return now.cpu.cores > m.cpu.cores + 0.1 ? now : undefined;
        },
        18_000,
      );
      expect(loaded.cpu.cores).toBeLessThanOrEqual(0.55);
      await busy;

      // 150 MiB held for 10 s: the working set grows by about that much.
      const held = probe
        .exec(workload, [
          "node",
          "-e",
          "const b = Buffer.alloc(150 * 1024 * 1024, 1); setTimeout(() => b.length, 10000)",
        ])
        .catch(() => undefined);
      const grown = await until(
        "the allocation in the metrics",
        async () => {
          const now = (await metrics(name)).body.metrics;
          return now.memory.bytes >= m.memory.bytes + 100 * MiB ? now : undefined;
        },
        20_000,
      );
      expect(grown.memory.bytes).toBeLessThan(512 * MiB);
      await held;

      // 8 MB of random bytes written through the files API: the volume holds them.
      const file = await fetch(`${system.url}${SESSIONS}/${name}/workspace/files/big.bin`, {
        method: "PUT",
        headers: { authorization: `Bearer ${system.adminToken}` },
        body: randomBytes(8_000_000),
      });
      expect(file.status).toBe(201);
      const filled = (await metrics(name)).body.metrics;
      expect(filled.volume.usedBytes).toBeGreaterThanOrEqual(m.volume.usedBytes + 7_500_000);
    }, 600_000);

    it("a chat token of the session reads them; another session's is refused; stopped is 412, unknown 404", async () => {
      const name = n("measured");
      const other = n("other");
      await readySession(other);
      const own = await metrics(name, await chatToken(name));
      expect(own.status, JSON.stringify(own.body)).toBe(200);
      const foreign = await metrics(name, await chatToken(other));
      expect(foreign.status).toBe(403);
      expect(foreign.body.code).toBe("PERMISSION_DENIED");

      // The per-session series: both sessions' limits under their names on the server's /metrics.
      const limitOf = (session: string) =>
        `agent_sessions_session_memory_limit_bytes{namespace="default",name="${session}"} ${512 * MiB}`;
      await until(
        "both sessions' series on /metrics",
        async () => {
          const text = await scrape();
          return text.includes(limitOf(name)) && text.includes(limitOf(other)) ? text : undefined;
        },
        30_000,
      );

      const stop = await call("PATCH", `${SESSIONS}/${other}`, { spec: { desiredState: "stopped" } });
      expect(stop.status).toBe(200);
      await phase(other, "Stopped");
      const stopped = await metrics(other);
      expect(stopped.status).toBe(412);
      expect(stopped.body.code).toBe("FAILED_PRECONDITION");
      expect(stopped.body.message).toMatch(/is Stopped: it has no running workload/);
      const unknown = await metrics(n("no-such-session"));
      expect(unknown.status).toBe(404);
      // A stopped session's series leave /metrics at the next pass; the running one's stay.
      const after = await until(
        "the stopped session's series gone",
        async () => {
          const text = await scrape();
          return text.includes(limitOf(other)) ? undefined : text;
        },
        30_000,
      );
      expect(after).toContain(limitOf(name));
      expect(after).toMatch(
        new RegExp(`agent_sessions_session_cpu_cores\\{namespace="default",name="${name}"\\} [0-9.]+`),
      );
    }, 600_000);
  });
}
