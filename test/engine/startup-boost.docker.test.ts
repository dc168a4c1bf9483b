/**
 * The startup CPU boost on Docker (issue 37; runner/docker/startup-boost.ts), real parts only:
 * `serve --no-runner` and a `runner --engine docker` over the real WebSocket, real dockerd and
 * Pulumi stacks, the reference image talking to the loopback model server.
 *
 * What a user checks with `GET …/metrics` (and the engine's own inspect): a session that starts
 * (create, resume) runs above its declared 0.5 CPU; once its first answer is done it is back to
 * 0.5 (memory never changed); a pause puts it back before freezing it; a runner killed while a
 * session runs boosted puts it back when it starts again; the stack shows no drift, boosted or not
 * (`policy check --expect-no-changes --refresh`).
 */
import { randomBytes } from "node:crypto";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { dockerClient } from "../../infra/docker/provider/provider.ts";
import { modelAgent } from "../fixtures/agent-manifest.ts";
import type { ModelServer } from "../fixtures/model-server.ts";
import { type Json, System, startSessionModelServer, until, writeLogTails } from "../support/system.ts";

const NS = "/v1/namespaces/default";
const SESSIONS = `${NS}/harnesssessions`;
const READY_MS = 240_000;
const MiB = 1024 * 1024;
const NAME = `boost-${randomBytes(2).toString("hex")}`;
const URL = `${SESSIONS}/${NAME}`;
const docker = dockerClient();

let system: System;
let model: ModelServer;
/** The cores a boosted session gets: 2, or the engine's cores when fewer. */
let boosted = 0;

async function session(): Promise<Json> {
  return (await system.call("GET", URL)).body;
}

async function phase(want: string): Promise<Json> {
  return until(
    `${NAME} ${want}`,
    async () => ((await session()).status?.phase === want ? session() : undefined),
    READY_MS,
  );
}

async function metrics(): Promise<{ limitCores: number; limitBytes: number }> {
  const got = await system.call("GET", `${URL}/metrics`);
  expect(got.status, JSON.stringify(got.body)).toBe(200);
  return { limitCores: got.body.metrics.cpu.limitCores, limitBytes: got.body.metrics.memory.limitBytes };
}

/** The session's CPU limit once it is `cores` (the runner lowers it just after relaying the answer). */
const limitBecomes = (cores: number) =>
  until(
    `limitCores ${cores}`,
    async () => ((await metrics()).limitCores === cores ? true : undefined),
    30_000,
  );

const nanoCpus = async (container: string) =>
  (await docker.getContainer(container).inspect()).HostConfig.NanoCpus;

async function noDrift(container: string): Promise<void> {
  const stack = `default--${container.replace(/^as-default-/, "")}`;
  const run = await system.runCli([
    "policy",
    "check",
    "-s",
    stack,
    "--expect-no-changes",
    "--refresh",
    "--data-dir",
    system.dataDir,
  ]);
  expect(run.stdout, `${run.stdout}${run.stderr.slice(-2000)}`).toContain(
    `${stack}: no policy violations, no changes (refreshed)`,
  );
  expect(run.code).toBe(0);
}

const setDesired = async (desiredState: string) =>
  expect((await system.call("PATCH", URL, { spec: { desiredState } })).status).toBe(200);

beforeAll(async () => {
  model = await startSessionModelServer("docker");
  process.env.E2E_MODEL_KEY = `sk-boost-${randomBytes(8).toString("hex")}`;
  // 2 cores while starting; a bound far longer than the test waits, so the answer ends the boost.
  system = new System(undefined, {
    AGENT_SESSIONS_STARTUP_CPU_BOOST: "2",
    AGENT_SESSIONS_STARTUP_CPU_BOOST_MS: "600000",
  });
  await system.startServer();
  await system.startRunner(["--engine", "docker"]);
  expect((await system.call("PUT", `${NS}/agents/boost`, modelAgent("boost", model))).status).toBe(201);
  boosted = Math.min(2, (await docker.info()).NCPU as number);
}, 120_000);

afterEach((context) => {
  if (context.task.result?.state === "fail") writeLogTails(system);
});

afterAll(async () => {
  await system?.call("DELETE", URL).catch(() => undefined);
  await system?.stop();
  await model?.close();
});

describe("startup CPU boost (docker)", () => {
  it("a created session starts boosted, is back to its declared 0.5 CPU after its first answer, and shows no drift either way", async () => {
    const put = await system.call("PUT", URL, {
      apiVersion: "agent-sessions.dev/v1alpha1",
      kind: "HarnessSession",
      metadata: { name: NAME },
      spec: { agentRef: "boost", runtimeRef: "reference", desiredState: "running", idleTimeout: "1h" },
    });
    expect(put.status, JSON.stringify(put.body)).toBe(201);
    const container: string = (await phase("Ready")).status.containerName;
    expect(boosted).toBeGreaterThan(0.5);
    expect(await metrics()).toEqual({ limitCores: boosted, limitBytes: 512 * MiB });
    // The stack records the declared container; the boost is nothing it holds.
    await noDrift(container);

    expect((await system.call("POST", `${URL}/requests`, { input: "hello" })).status).toBe(200);
    await limitBecomes(0.5);
    expect(await metrics()).toEqual({ limitCores: 0.5, limitBytes: 512 * MiB });
    expect(await nanoCpus(container)).toBe(500_000_000);
    await noDrift(container);
  }, 600_000);

  it("a resume starts boosted again; a pause puts it back before freezing it", async () => {
    await setDesired("stopped");
    await phase("Stopped");
    await setDesired("running");
    const container: string = (await phase("Ready")).status.containerName;
    expect((await metrics()).limitCores).toBe(boosted);
    await setDesired("paused");
    await phase("Paused");
    // Paused is shown once the pause is admitted (nothing in flight); the runner then puts the
    // limit back and freezes the container, a moment later (pause.docker.test.ts waits alike).
    await until(
      "frozen",
      async () => ((await docker.getContainer(container).inspect()).State.Paused ? true : undefined),
      30_000,
    );
    expect(await nanoCpus(container)).toBe(500_000_000);
    // Woken by a request, at its declared limit. desiredState is still paused: idle again right
    // after its answer, it is frozen again at once (Ready lasts too little to be polled for).
    expect((await system.call("POST", `${URL}/requests`, { input: "hello again" })).status).toBe(200);
    expect(await nanoCpus(container)).toBe(500_000_000);
    await phase("Paused");
  }, 600_000);

  it("a runner killed while its session runs boosted puts it back to its declared limit when it starts again", async () => {
    await setDesired("stopped");
    await phase("Stopped");
    await setDesired("running");
    const container: string = (await phase("Ready")).status.containerName;
    expect(await nanoCpus(container)).toBe(boosted * 1e9);
    await system.kill("runner");
    // Nothing lowered it while no runner ran.
    expect(await nanoCpus(container)).toBe(boosted * 1e9);
    await system.startRunner(["--engine", "docker"]);
    expect(await nanoCpus(container)).toBe(500_000_000);
    await phase("Ready");
    expect((await metrics()).limitCores).toBe(0.5);
    await noDrift(container);
  }, 600_000);
});
