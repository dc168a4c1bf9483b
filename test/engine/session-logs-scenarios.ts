/**
 * A session's logs (issue 42) on one engine, real parts only: a server and a runner over the real
 * WebSocket, the engine and the reference image. What a user checks with `GET
 * …/harnesssessions/{name}/logs` and `agent-sessions logs`: an agent's stderr is there, with a
 * secret it printed redacted; a runtime whose agent crashes at start shows why, and the runner's
 * note of its exit code, on the Failed session; `follow` streams a line written later; a chat
 * token of another session is refused and an unknown session is 404 (CLI exit 3).
 */
import { randomBytes } from "node:crypto";
import { type ChildProcess, spawn } from "node:child_process";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { modelAgent } from "../fixtures/agent-manifest.ts";
import type { ModelServer } from "../fixtures/model-server.ts";
import { dockerProbe, type EngineProbe, kubernetesProbe } from "../support/engine-probes.ts";
import { type Json, System, startSessionModelServer, until, writeLogTails } from "../support/system.ts";
import { repoRoot } from "../support/testbed.ts";

export type LogsScenarioOptions = {
  engine: "docker" | "kubernetes";
  /** Appended to every session name: the cluster is shared by test files. */
  suffix?: string;
};

const NS = "/v1/namespaces/default";
const SESSIONS = `${NS}/harnesssessions`;
const READY_MS = 300_000;
/** A value the loud agent prints as if by mistake: it must never reach a reader. */
const PRINTED_SECRET = `tok-${randomBytes(12).toString("hex")}`;

export function sessionLogsScenarios(options: LogsScenarioOptions): void {
  const n = (name: string) => `${name}${options.suffix ?? ""}`;
  let system: System;
  let model: ModelServer;
  let probe: EngineProbe;
  const call = (method: string, path: string, body?: unknown, token?: string) =>
    system.call(method, path, body, token);
  const logs = (name: string, query = "", token?: string) =>
    call("GET", `${SESSIONS}/${name}/logs${query}`, undefined, token);

  /** A runtime on the reference image whose agent runs `script` first (then, maybe, the reference agent). */
  async function runtime(name: string, script: string): Promise<void> {
    const reference = (await call("GET", `${NS}/agentruntimes/reference`)).body;
    const put = await call("PUT", `${NS}/agentruntimes/${name}`, {
      apiVersion: "agent-sessions.dev/v1alpha1",
      kind: "AgentRuntime",
      metadata: { name },
      spec: { ...reference.spec, agent: { command: ["/bin/sh", "-c", script] } },
    });
    expect([200, 201], JSON.stringify(put.body)).toContain(put.status);
    const agent = await call(
      "PUT",
      `${NS}/agents/${name}-agent`,
      modelAgent(`${name}-agent`, model, { runtimeRef: name }),
    );
    expect([200, 201], JSON.stringify(agent.body)).toContain(agent.status);
  }

  async function session(name: string, agent: string, wanted: string): Promise<Json> {
    const put = await call("PUT", `${SESSIONS}/${name}`, {
      apiVersion: "agent-sessions.dev/v1alpha1",
      kind: "HarnessSession",
      metadata: { name },
      spec: { agentRef: agent },
    });
    expect([200, 201], JSON.stringify(put.body)).toContain(put.status);
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

  beforeAll(async () => {
    model = await startSessionModelServer(options.engine);
    process.env.E2E_MODEL_KEY = `sk-e2e-${randomBytes(12).toString("hex")}`;
    probe = options.engine === "docker" ? dockerProbe() : await kubernetesProbe();
    system = new System();
    await system.startServer();
    await system.startRunner(["--engine", options.engine]);
    await runtime(
      "loud",
      `echo "loud agent starting; API_TOKEN=${PRINTED_SECRET}" >&2; exec /bin/node /app/runtimes/reference/agent.ts`,
    );
    await runtime("crasher", `echo "crasher: cannot read /etc/crasher.conf" >&2; exit 3`);
  }, 120_000);

  afterEach((context) => {
    if (context.task.result?.state === "fail") writeLogTails(system);
  });

  afterAll(async () => {
    for (const s of ["talker", "crashed"])
      await system?.call("DELETE", `${SESSIONS}/${n(s)}`).catch(() => undefined);
    await system?.stop();
    await model?.close();
  });

  describe(`session logs (${options.engine})`, () => {
    it("show the agent's stderr with a secret it printed redacted; the CLI prints them", async () => {
      const name = n("talker");
      await session(name, "loud-agent", "Ready");
      const reply = await until(
        "the agent's stderr in the logs",
        async () => {
          const r = await logs(name);
          expect(r.status, JSON.stringify(r.body)).toBe(200);
          return (r.body.lines as Json[]).some((l) => l.line.includes("loud agent starting")) ? r : undefined;
        },
        30_000,
      );
      const text = JSON.stringify(reply.body);
      expect(text).not.toContain(PRINTED_SECRET);
      expect(text).not.toContain(process.env.E2E_MODEL_KEY);
      const line = (reply.body.lines as Json[]).find((l) => l.line.includes("loud agent starting"));
      expect(line).toMatchObject({
        source: "agent",
        stream: "stderr",
        line: "loud agent starting; API_TOKEN=[redacted]",
      });
      expect(reply.body).toMatchObject({ namespace: "default", name });

      const server = ["--server", system.url, "--token", system.adminToken];
      const cli = await system.runCli(["logs", name, "--tail", "50", ...server]);
      expect(cli.code, cli.stderr).toBe(0);
      expect(cli.stdout).toMatch(/Z agent\/stderr\s+loud agent starting; API_TOKEN=\[redacted\]/);
      const missing = await system.runCli(["logs", n("no-such-session"), ...server]);
      expect(missing.code).toBe(3);
    }, 600_000);

    it("a runtime whose agent crashes at start: the Failed session's logs say why and with what code", async () => {
      const name = n("crashed");
      await session(name, "crasher-agent", "Failed");
      const reply = await until(
        "the crash in the logs",
        async () => {
          const r = await logs(name);
          const lines = (r.body.lines ?? []) as Json[];
          return lines.some((l) => l.line.includes("agent exited with code 3")) ? lines : undefined;
        },
        30_000,
      );
      expect(reply.find((l) => l.line.includes("cannot read /etc/crasher.conf"))).toMatchObject({
        source: "agent",
        stream: "stderr",
      });
      expect(reply.find((l) => l.line.includes("agent exited with code 3"))).toMatchObject({
        source: "runner",
      });
    }, 600_000);

    it("follow streams a line the workload writes later; tailLines bounds the answer; another session's token is refused", async () => {
      const name = n("talker");
      const workload = (await call("GET", `${SESSIONS}/${name}`)).body.status.containerName as string;
      const child: ChildProcess = spawn(
        join(repoRoot, "bin", "agent-sessions"),
        ["logs", name, "-f", "--tail", "1"],
        {
          env: {
            ...process.env,
            AGENT_SESSIONS_SERVER_URL: system.url,
            AGENT_SESSIONS_TOKEN: system.adminToken,
          },
          stdio: ["ignore", "pipe", "pipe"],
        },
      );
      let out = "";
      child.stdout?.on("data", (d: Buffer) => {
        out += d.toString();
      });
      const exited = new Promise<number | null>((resolve) => child.once("close", resolve));
      const marker = `follow-marker-${randomBytes(4).toString("hex")}`;
      // Written to the workload's main process's stdout: the engine's log of the container.
      await probe.exec(workload, ["/bin/sh", "-c", `echo ${marker} > /proc/1/fd/1`]);
      await until("the marker in the follow", async () => (out.includes(marker) ? true : undefined), 30_000);
      expect(out).toMatch(new RegExp(`Z workload/stdout\\s+${marker}`));
      child.kill("SIGINT");
      expect(await exited).toBe(0);

      const one = await logs(name, "?tailLines=1");
      expect(one.body.lines).toHaveLength(1);
      expect(one.body.truncated).toBe(true);
      const bad = await logs(name, "?tailLines=-1");
      expect(bad.status).toBe(400);

      const other = await call("POST", "/v1/tokens", {
        name: `logs-${randomBytes(3).toString("hex")}`,
        scopes: [`session:default/${n("crashed")}:chat`],
      });
      const refused = await logs(name, "", other.body.token as string);
      expect(refused.status).toBe(403);
      expect((await logs(n("crashed"), "", other.body.token as string)).status).toBe(200);
    }, 600_000);
  });
}
