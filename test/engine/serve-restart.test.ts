/**
 * Issue 21, "Must show": `agent-sessions serve` with its embedded runner (server and runner in
 * one process, Docker: the default a new user runs) is killed with SIGKILL while a HarnessSession
 * is Ready, and started again on the same data dir. Real processes, real dockerd, real Pulumi,
 * the reference image talking to the loopback model server.
 *
 * (a) The container survives the kill: the restarted runner reads the workspace's adapter token
 *     back from its stack, starts the agent again in the same container, and the session is Ready
 *     and answering again, one container, conversation kept.
 * (b) The same, with the engine "restarted" while serve is down. The shared dockerd must not be
 *     restarted here (the Kubernetes cluster's kubelet and other suites use it), so the test makes
 *     what a dockerd restart without live-restore leaves behind: the session's container stopped
 *     (`docker stop`, exited; our containers have restart policy "no", so dockerd would not
 *     start them again either). The restarted runner finds the workload not running, reports the
 *     session ERRORED WorkspaceNotRunning, and the controller brings it back up by itself (reason
 *     Recovering): a new container under the same name, the same volume, conversation kept.
 * (c) Across each restart the status is polled and requests are sent back to back: no status shows
 *     Ready while a request fails, every refusal is the proxy's "not Ready" (412 with the phase),
 *     never a relay failure (FAILED_PRECONDITION/UNAVAILABLE from the runner).
 *
 * Bound: Ready and answering within BACK_S (120 s) of the restarted process listening; (b) pays a
 * Pulumi `up` for the new container. The measured times are printed.
 */
import { randomBytes } from "node:crypto";
import { rmSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type ModelServer, startModelServer } from "../fixtures/model-server.ts";
import { dockerCli } from "../support/agent-system.ts";
import { dockerClient, removeSessionLeftovers } from "../support/session-harness.ts";
import { BRIDGE_IP, type Json, System } from "../support/system.ts";
import { applyTestbedEnv, repoRoot } from "../support/testbed.ts";
import { modelAgent } from "../fixtures/agent-manifest.ts";

applyTestbedEnv();

const API = "agent-sessions.dev/v1alpha1";
const NS = "/v1/namespaces/default";
const NAME = `restart-${randomBytes(3).toString("hex")}`;
const SESSION = `${NS}/harnesssessions/${NAME}`;
const TOKEN = `tok-${randomBytes(4).toString("hex")}`;
const SECRET = `sk-restart-${randomBytes(8).toString("hex")}`;
/** Ready and answering again within this many seconds of the restarted process listening. */
const BACK_S = 120;

const system = new System();
let model: ModelServer;
/** The session label of the session's Docker objects, for the cleanup. */
let workspace: string | undefined;
/** The session's workload (container) name. */
let containerName = "";

type Observation =
  | { at: number; kind: "status"; phase: string; reason: string | undefined }
  | { at: number; kind: "request"; status: number; code?: string; phase?: string; output?: string };

async function status(): Promise<Json> {
  const got = await system.call("GET", SESSION);
  if (got.status !== 200) throw new Error(`GET ${SESSION}: ${got.status} ${JSON.stringify(got.body)}`);
  return got.body;
}

const readyReason = (s: Json): string | undefined =>
  s.status.conditions.find((c: { type: string }) => c.type === "Ready")?.reason;

/** The session's containers, running or not (by its workload name, which a re-provision keeps). */
async function containers(): Promise<{ id: string; state: string }[]> {
  const name = containerName;
  const list = await dockerClient().listContainers({ all: true, filters: JSON.stringify({ name: [name] }) });
  return list.filter((c) => c.Names.includes(`/${name}`)).map((c) => ({ id: c.Id, state: c.State }));
}

/**
 * Right after the restarted process listens: status and a request, back to back, until the
 * session answered while Ready, then a few more rounds. Everything seen, in order.
 */
async function watchComingBack(): Promise<{ seen: Observation[]; backMs: number }> {
  const started = Date.now();
  const seen: Observation[] = [];
  let answeredAt: number | undefined;
  let extra = 0;
  while (extra < 3) {
    if (Date.now() - started > BACK_S * 1000)
      throw new Error(`not answering within ${BACK_S} s: ${JSON.stringify(seen.slice(-6))}`);
    const s = await status();
    seen.push({ at: Date.now() - started, kind: "status", phase: s.status.phase, reason: readyReason(s) });
    const reply = await system.call("POST", `${SESSION}/requests`, { input: "recall the token" });
    seen.push({
      at: Date.now() - started,
      kind: "request",
      status: reply.status,
      ...(reply.status === 200
        ? { output: reply.body.output }
        : { code: reply.body.code, phase: reply.body.details?.phase }),
    });
    if (reply.status === 200) answeredAt ??= Date.now() - started;
    if (answeredAt !== undefined) extra += 1;
    else await new Promise((r) => setTimeout(r, 200));
  }
  return { seen, backMs: answeredAt ?? -1 };
}

/** (c): every refusal is "not Ready" with a phase other than Ready; from the first Ready on, every request is served. */
function expectReadyMeansServing(seen: Observation[]): void {
  for (const o of seen)
    if (o.kind === "request" && o.status !== 200) {
      expect(o, "a request failed other than as not Ready").toMatchObject({
        status: 412,
        code: "FAILED_PRECONDITION",
      });
      expect(o.phase, "a refused request's phase").toBeDefined();
      expect(o.phase).not.toBe("Ready");
    }
  const firstReady = seen.findIndex((o) => o.kind === "status" && o.phase === "Ready");
  expect(firstReady).toBeGreaterThanOrEqual(0);
  const afterReady = seen.slice(firstReady).filter((o) => o.kind === "request");
  expect(afterReady.length).toBeGreaterThan(0);
  for (const o of afterReady)
    expect(o, "a request after the session showed Ready").toMatchObject({ status: 200 });
}

beforeAll(async () => {
  model = await startModelServer(BRIDGE_IP, 0);
  process.env.E2E_MODEL_KEY = SECRET;
  await system.startEmbedded();
  const agent = await system.call("PUT", `${NS}/agents/${NAME}`, modelAgent(NAME, model));
  expect(agent.status, JSON.stringify(agent.body)).toBe(201);
  const created = await system.call("PUT", SESSION, {
    apiVersion: API,
    kind: "HarnessSession",
    metadata: { name: NAME },
    spec: { agentRef: NAME, runtimeRef: "reference", idleTimeout: "0" },
  });
  expect(created.status, JSON.stringify(created.body)).toBe(201);
  const end = Date.now() + 180_000;
  while ((await status()).status.phase !== "Ready") {
    if (Date.now() > end) throw new Error(`${NAME} not Ready: ${JSON.stringify((await status()).status)}`);
    await new Promise((r) => setTimeout(r, 250));
  }
  containerName = (await status()).status.containerName;
  const container = await dockerClient().getContainer(containerName).inspect();
  workspace = container.Config.Labels["agent-sessions.dev/session"];
  const told = await system.call("POST", `${SESSION}/requests`, { input: `remember ${TOKEN}` });
  expect(told.body.output).toBe(`OK, I will remember ${TOKEN}.`);
}, 240_000);

afterAll(async () => {
  if (system.server) await system.call("DELETE", SESSION).catch(() => undefined);
  await system.stop();
  // By the workload's session label (the workspace's name, not the HarnessSession's).
  if (workspace) {
    await removeSessionLeftovers(dockerClient(), workspace);
    // The stack's config file beside the project, when DELETE (stack rm) did not run.
    rmSync(join(repoRoot, `Pulumi.default--${workspace}.yaml`), { force: true });
  }
  await model?.close();
  rmSync(system.dataDir, { recursive: true, force: true });
}, 120_000);

describe("serve with its embedded runner, killed with SIGKILL and started again on the same data dir", () => {
  it("(a) a Ready session is Ready and answering again in the same container, conversation kept, and never Ready while a request fails", async () => {
    const [before] = await containers();
    expect(before?.state).toBe("running");
    await system.kill("server", "SIGKILL");
    await system.startEmbedded({ waitForRunner: false });
    const { seen, backMs } = await watchComingBack();
    console.log(`serve-restart (a): answering ${backMs} ms after the restarted serve listened`);
    expectReadyMeansServing(seen);
    const answers = seen.filter((o) => o.kind === "request" && o.status === 200);
    for (const a of answers) expect(a).toMatchObject({ output: `The token is ${TOKEN}.` });
    expect(await containers()).toEqual([{ id: before?.id, state: "running" }]);
    expect(readyReason(await status())).toBe("SessionReady");
  }, 240_000);

  it("(b) with the engine restarted while serve was down (its container stopped): back by itself in one new container on the same volume, conversation kept, never Ready while a request fails", async () => {
    const [before] = await containers();
    await system.kill("server", "SIGKILL");
    // What a dockerd restart without live-restore leaves (see the file comment): the container exited.
    await dockerCli("stop", "--time", "5", before?.id ?? "");
    expect(await containers()).toEqual([{ id: before?.id, state: "exited" }]);
    await system.startEmbedded({ waitForRunner: false });
    const { seen, backMs } = await watchComingBack();
    console.log(`serve-restart (b): answering ${backMs} ms after the restarted serve listened`);
    expectReadyMeansServing(seen);
    // It came back by itself, saying so on the way.
    expect(seen.some((o) => o.kind === "status" && o.reason === "Recovering")).toBe(true);
    const answers = seen.filter((o) => o.kind === "request" && o.status === 200);
    for (const a of answers) expect(a).toMatchObject({ output: `The token is ${TOKEN}.` });
    const after = await containers();
    expect(after).toHaveLength(1);
    expect(after[0]?.state).toBe("running");
    expect(after[0]?.id).not.toBe(before?.id);
    const s = await status();
    expect(s.status).toMatchObject({ phase: "Ready", conditions: [{ reason: "SessionReady" }] });
  }, 240_000);
});
