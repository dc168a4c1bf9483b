/**
 * A snapshot travels between engines (issue 38), real parts only: one server with a Docker runner
 * and a Kubernetes runner. A session on Docker is told a token and given a file; its snapshot's
 * archive (exported through the API) is imported onto the Kubernetes runner and forked there: the
 * fork recalls the token and has the file. And the other way round, Kubernetes to Docker.
 */
import { randomBytes } from "node:crypto";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { modelAgent } from "../fixtures/agent-manifest.ts";
import { startModelServer, type ModelServer } from "../fixtures/model-server.ts";
import { type Json, type Proc, System, until, writeLogTails } from "../support/system.ts";
import { sessionHostAddress } from "../support/testbed.ts";
import { storageExists } from "./session-snapshot-scenarios.ts";

const API = "agent-sessions.dev/v1alpha1";
const NS = "/v1/namespaces/default";
const SESSIONS = `${NS}/harnesssessions`;
const SNAPSHOTS = `${NS}/sessionsnapshots`;
const TOKEN = `tok-${randomBytes(4).toString("hex")}`;
const READY_MS = 300_000;

let system: System;
let kubeRunner: Proc | undefined;
let model: ModelServer;

async function phase(name: string, wanted: string): Promise<Json> {
  return until(
    `${name} ${wanted}`,
    async () => {
      const s = await system.call("GET", `${SESSIONS}/${name}`);
      if (s.body.status?.phase === wanted) return s.body;
      throw new Error(`phase ${s.body.status?.phase}: ${JSON.stringify(s.body.status?.conditions ?? [])}`);
    },
    READY_MS,
  );
}

function session(name: string, spec: Record<string, unknown>) {
  return system.call("PUT", `${SESSIONS}/${name}`, {
    apiVersion: API,
    kind: "HarnessSession",
    metadata: { name },
    spec: {
      agentRef: "assistant",
      runtimeRef: "reference",
      desiredState: "running",
      idleTimeout: "30m",
      ...spec,
    },
  });
}

async function bytes(method: string, path: string, body?: Uint8Array) {
  const res = await fetch(`${system.url}${path}`, {
    method,
    headers: { authorization: `Bearer ${system.adminToken}` },
    ...(body ? { body } : {}),
  });
  return { status: res.status, body: Buffer.from(await res.arrayBuffer()) };
}

beforeAll(async () => {
  // One model server both engines' sessions reach: on the address Kubernetes sessions see the
  // host at, which the Docker bridge reaches too (the link's host address is on this machine).
  model = await startModelServer(sessionHostAddress("kubernetes"), 0);
  process.env.E2E_MODEL_KEY = `sk-e2e-${randomBytes(12).toString("hex")}`;
  system = new System();
  await system.startServer();
  await system.startRunner(["--engine", "docker", "--label", "engine=docker"]);
  kubeRunner = await system.launchRunner("kube", ["--engine", "kubernetes", "--label", "engine=kubernetes"]);
  const agent = await system.call("PUT", `${NS}/agents/assistant`, modelAgent("assistant", model));
  expect(agent.status, JSON.stringify(agent.body)).toBe(201);
}, 180_000);

afterEach((context) => {
  if (context.task.result?.state === "fail") writeLogTails(system);
});

afterAll(async () => {
  await Promise.all(
    ["on-docker", "on-kube", "docker-to-kube", "kube-to-docker"].map((s) =>
      system?.call("DELETE", `${SESSIONS}/${s}`).catch(() => undefined),
    ),
  );
  for (const s of ["from-docker", "from-kube", "moved-to-kube", "moved-to-docker"])
    await system?.call("DELETE", `${SNAPSHOTS}/${s}`).catch(() => undefined);
  kubeRunner?.child.kill("SIGTERM");
  await kubeRunner?.exited;
  await system?.stop();
  await model?.close();
});

describe("a snapshot's archive seeds a session on the other engine", () => {
  for (const [from, to] of [
    ["docker", "kubernetes"],
    ["kubernetes", "docker"],
  ] as const) {
    const short = (e: string) => (e === "docker" ? "docker" : "kube");
    it(`${from} → ${to}: the fork recalls the conversation and has the file`, async () => {
      const source = `on-${short(from)}`;
      expect((await session(source, { runnerSelector: { engine: from } })).status).toBe(201);
      await phase(source, "Ready");
      const told = await system.call("POST", `${SESSIONS}/${source}/requests`, {
        input: `remember ${TOKEN}`,
      });
      expect(told.status, JSON.stringify(told.body)).toBe(200);
      const put = await bytes(
        "PUT",
        `${SESSIONS}/${source}/workspace/files/work/result.txt`,
        Buffer.from(`from ${from}\n`),
      );
      expect(put.status).toBe(201);
      const snap = `from-${short(from)}`;
      const taken = await system.call("POST", `${SESSIONS}/${source}:snapshot`, { name: snap });
      expect(taken.status, JSON.stringify(taken.body)).toBe(201);
      expect(taken.body.status.engine).toBe(from);

      const archive = await bytes("GET", `${SNAPSHOTS}/${snap}/archive`);
      expect(archive.status).toBe(200);
      const moved = `moved-to-${short(to)}`;
      const imported = await bytes("PUT", `${SNAPSHOTS}/${moved}/archive?engine=${to}`, archive.body);
      expect(imported.status, imported.body.toString()).toBe(201);
      expect(JSON.parse(imported.body.toString()).status).toMatchObject({ phase: "Ready", engine: to });

      const fork = `${short(from)}-to-${short(to)}`;
      expect((await session(fork, { source: { snapshotRef: moved } })).status).toBe(201);
      await phase(fork, "Ready");
      const recalled = await system.call("POST", `${SESSIONS}/${fork}/requests`, {
        input: "what token did I give you?",
      });
      expect(recalled.status, JSON.stringify(recalled.body)).toBe(200);
      expect(recalled.body.output).toContain(TOKEN);
      const file = await bytes("GET", `${SESSIONS}/${fork}/workspace/files/work/result.txt`);
      expect(file.body.toString()).toBe(`from ${from}\n`);
      // It runs where its snapshot is: its volume is on the other engine.
      const forked = await system.call("GET", `${SESSIONS}/${fork}`);
      expect(await storageExists(to, `${forked.body.status.containerName}-workspace`)).toBe(true);
    });
  }
});
