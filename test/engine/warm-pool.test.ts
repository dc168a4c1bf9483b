/**
 * Issue 8, the warm pool, end to end on the real parts: `agent-sessions serve --no-runner` and a
 * separate runner as processes, real Pulumi stacks on the real dockerd, the reference agent in
 * the reference image. An AgentRuntime with `spec.warmPool.size` makes the runner keep that many
 * workspaces of each Agent bound to it provisioned (agent pre-started); SpawnAgent and a new
 * HarnessSession claim one instead of provisioning. The tests run in file order and share the
 * pools (filling one takes a Pulumi `up` per entry).
 */
import { randomBytes } from "node:crypto";
import { rmSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { API_VERSION } from "../../contracts/resources.ts";
import {
  agentPids,
  agentStarts,
  type ContainerInfo,
  containersOf,
  dockerCli,
  removeEverything,
  SessionFollower,
  setUpNamespace,
  stacksOf,
  volumesAndNetworksOf,
} from "../support/agent-system.ts";
import { System, until } from "../support/system.ts";
import { applyTestbedEnv, referenceImage } from "../support/testbed.ts";
import { workloadName } from "../../contracts/session-spec.ts";

applyTestbedEnv();

const NS = `wp-${randomBytes(3).toString("hex")}`;
const system = new System();
const claimed = new Set<string>();
const followers: SessionFollower[] = [];
/** Pool sizes: agents a and h share runtime `pooled` (2 each), b has runtime `pooled-one` (1). */
const SIZE = { a: 2, b: 1 } as const;
const FILL_MS = 240_000;

async function putRuntime(name: string, size: number): Promise<void> {
  const res = await system.call("PUT", `/v1/namespaces/${NS}/agentruntimes/${name}`, {
    apiVersion: API_VERSION,
    kind: "AgentRuntime",
    metadata: { name, namespace: NS },
    spec: {
      image: referenceImage().image,
      contract: "v1alpha2",
      capabilities: ["streaming"],
      approved: true,
      warmPool: { size },
    },
  });
  expect(res.status, JSON.stringify(res.body)).toBeLessThan(300);
}

async function putAgent(name: string, runtimeRef: string): Promise<void> {
  const res = await system.call("PUT", `/v1/namespaces/${NS}/agents/${name}`, {
    apiVersion: API_VERSION,
    kind: "Agent",
    metadata: { name, namespace: NS },
    spec: { runtimeRef },
  });
  expect(res.status, JSON.stringify(res.body)).toBeLessThan(300);
}

/** Running containers of an Agent's pool not claimed by anyone (by the session label `pool-<agent>-…`). */
async function unclaimed(agent: string): Promise<ContainerInfo[]> {
  return (await containersOf(NS)).filter(
    (c) => c.session.startsWith(`pool-${agent}-`) && c.state === "running" && !claimed.has(c.name),
  );
}

/** Waits until the pool of `agent` holds exactly `size` unclaimed running containers, each with its agent up. */
async function filled(agent: string, size: number): Promise<ContainerInfo[]> {
  return until(
    `pool of ${agent} at ${size}`,
    async () => {
      const list = await unclaimed(agent);
      if (list.length !== size) return undefined;
      for (const c of list) if ((await agentPids(c.name)).length !== 1) return undefined;
      return list;
    },
    FILL_MS,
  );
}

async function spawn(agent: string): Promise<{ container_name: string; session_id: string; state: string }> {
  const res = await system.rpc("SpawnAgent", { agent_ref: `${NS}/${agent}`, client_request_id: "" });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  claimed.add(res.body.container_name);
  return res.body;
}

beforeAll(async () => {
  await system.startServer();
  await system.startRunner();
  await setUpNamespace(system, NS, []);
  await putRuntime("pooled", SIZE.a);
  await putRuntime("pooled-one", SIZE.b);
  await putAgent("a", "pooled");
  await putAgent("b", "pooled-one");
}, 120_000);

afterAll(async () => {
  for (const f of followers) await f.close();
  // Pools off, so the runner destroys its unclaimed entries itself; then the claimed ones.
  if (system.server && system.runner) {
    await putRuntime("pooled", 0).catch(() => undefined);
    await putRuntime("pooled-one", 0).catch(() => undefined);
    await until(
      "pools emptied",
      // Containers go first, then networks and volumes, then the stacks. A claimed entry keeps
      // its pool name and its stack: removeEverything below takes it.
      async () =>
        (await stacksOf(system))
          .filter((s) => s.startsWith(`${NS}--pool-`))
          .every((s) => [...claimed].some((name) => name.endsWith(s.split("--")[1] ?? "?"))),
      FILL_MS,
    ).catch(() => undefined);
  }
  const forced = await removeEverything(system, NS, claimed);
  await system.stop();
  if (forced.length > 0) console.warn(`warm-pool: forced removal of ${forced.join(", ")}`);
  rmSync(system.dataDir, { recursive: true, force: true });
}, 600_000);

describe("warm pool (real Docker, real Pulumi)", () => {
  let first: { container_name: string; session_id: string; state: string };

  it("fills each Agent's pool to its size: real containers, real stacks, agents pre-started", async () => {
    const a = await filled("a", SIZE.a);
    const b = await filled("b", SIZE.b);
    const stacks = await stacksOf(system);
    for (const c of [...a, ...b]) expect(stacks).toContain(`${NS}--${c.session}`);
    // Each entry has its own volume.
    const { volumes } = await volumesAndNetworksOf(NS);
    for (const c of [...a, ...b]) expect(volumes).toContain(`${c.name}-workspace`);
  });

  it("SpawnAgent claims an entry of the account's own pool and is READY", async () => {
    const before = (await unclaimed("a")).map((c) => c.name);
    const started = Date.now();
    first = await spawn("a");
    console.log(`warm-pool: SpawnAgent claim→READY ${Date.now() - started} ms`);
    expect(first.state).toBe("READY");
    expect(before).toContain(first.container_name);
    const status = await system.rpc("GetAgentStatus", { session_id: first.session_id });
    expect(status.body.sessions[0]).toMatchObject({ state: "READY", container_name: first.container_name });
    // The adopted agent is the one started ahead: one agent process, its start frame under this session.
    expect(await agentPids(first.container_name)).toHaveLength(1);
    const follower = new SessionFollower(system, first.session_id);
    followers.push(follower);
    await until("agent started frame", () => agentStarts(follower.events, first.session_id).length === 1);
    expect(agentStarts(follower.events, first.session_id)).toEqual([{ starts: 1, messages: 0 }]);
  });

  it("the pool refills to its size in the background", async () => {
    const refilled = await filled("a", SIZE.a);
    expect(refilled.map((c) => c.name)).not.toContain(first.container_name);
  });

  it("the claimed workspace is an ordinary one: the agent answers, and delete destroys its stack", async () => {
    const sent = await system.rpc("SendAgentMessage", {
      session_id: first.session_id,
      message: { type: "message", text: "hello" },
    });
    expect(sent.status, JSON.stringify(sent.body)).toBe(200);
    const follower = followers[0];
    await until("echo", () =>
      follower?.frames.some(
        (f) => f.type === "message" && (f.payload as { text?: string }).text === "echo: hello",
      ),
    );
    const session = (await containersOf(NS)).find((c) => c.name === first.container_name)?.session ?? "";
    expect(await stacksOf(system)).toContain(`${NS}--${session}`);
    const removed = await system.rpc("RemoveAgentWorkspace", { container_name: first.container_name });
    expect(removed.body).toEqual({ container_name: first.container_name, removed: true });
    claimed.delete(first.container_name);
    expect(await stacksOf(system)).not.toContain(`${NS}--${session}`);
    expect((await containersOf(NS)).map((c) => c.name)).not.toContain(first.container_name);
    expect((await volumesAndNetworksOf(NS)).volumes).not.toContain(`${first.container_name}-workspace`);
  });

  it("the next claim holds no trace of a previous use: a fresh volume, a first start, nothing told", async () => {
    await filled("a", SIZE.a);
    const second = await spawn("a");
    expect(second.container_name).not.toBe(first.container_name);
    const follower = new SessionFollower(system, second.session_id);
    followers.push(follower);
    await until("agent started frame", () => agentStarts(follower.events, second.session_id).length === 1);
    expect(agentStarts(follower.events, second.session_id)).toEqual([{ starts: 1, messages: 0 }]);
    const files = (await dockerCli("exec", second.container_name, "ls", "-A", "/workspace"))
      .split(/\s+/)
      .filter(Boolean);
    expect(files).toEqual([".agent-state.json"]);
  });

  it("two accounts never get the same workspace", async () => {
    const poolA = (await unclaimed("a")).map((c) => c.name);
    const fromB = await spawn("b");
    expect(fromB.state).toBe("READY");
    expect(fromB.container_name).toMatch(new RegExp(`^${workloadName(NS, "pool-b-")}`));
    expect(poolA).not.toContain(fromB.container_name);
    const all = await system.rpc("GetAgentStatus", {});
    const live = (all.body.sessions as { container_name: string; agent_ref: string; state: string }[]).filter(
      (s) => s.state === "READY",
    );
    const owners = new Map<string, Set<string>>();
    for (const s of live)
      owners.set(s.container_name, (owners.get(s.container_name) ?? new Set()).add(s.agent_ref));
    for (const agents of owners.values()) expect(agents.size).toBe(1);
    expect(owners.get(fromB.container_name)).toEqual(new Set([`${NS}/b`]));
  });

  it("a new HarnessSession claims from its Agent's pool; DELETE destroys the claimed stack", async () => {
    await putAgent("h", "pooled");
    const pool = await filled("h", SIZE.a);
    const created = await system.call("PUT", `/v1/namespaces/${NS}/harnesssessions/chat`, {
      apiVersion: API_VERSION,
      kind: "HarnessSession",
      metadata: { name: "chat" },
      spec: { agentRef: "h", runtimeRef: "pooled", desiredState: "running", idleTimeout: "10m" },
    });
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    const ready = await until("HarnessSession Ready", async () => {
      const got = await system.call("GET", `/v1/namespaces/${NS}/harnesssessions/chat`);
      return got.body.status?.phase === "Ready" ? got.body : undefined;
    });
    const container: string = ready.status.containerName;
    claimed.add(container);
    expect(pool.map((c) => c.name)).toContain(container);
    expect(ready.status.resolvedImageDigest).toBe(referenceImage().digest);
    const session = (await containersOf(NS)).find((c) => c.name === container)?.session ?? "";
    const deleted = await system.call("DELETE", `/v1/namespaces/${NS}/harnesssessions/chat`);
    expect(deleted.status, JSON.stringify(deleted.body)).toBeLessThan(300);
    await until("HarnessSession gone", async () => {
      const got = await system.call("GET", `/v1/namespaces/${NS}/harnesssessions/chat`);
      return got.status === 404;
    });
    claimed.delete(container);
    expect(await stacksOf(system)).not.toContain(`${NS}--${session}`);
    expect((await containersOf(NS)).map((c) => c.name)).not.toContain(container);
    // Pool h off again (fewer stacks for the rest of the file).
    await system.call("DELETE", `/v1/namespaces/${NS}/agents/h`);
    await until("pool of h destroyed", async () => (await unclaimed("h")).length === 0, FILL_MS);
  });

  it("a server restart leaks no pool workspace; a pool turned off is destroyed", async () => {
    const before = (await filled("a", SIZE.a)).map((c) => c.name).sort();
    await system.kill("server");
    await system.startServer();
    await until("runner reattached", () =>
      system.runner?.logs.join("").match(/runner attached[\s\S]*runner attached/),
    );
    // Several sync rounds after the restart: the same entries, no more.
    await new Promise((r) => setTimeout(r, 15_000));
    expect((await unclaimed("a")).map((c) => c.name).sort()).toEqual(before);
    expect((await unclaimed("b")).length).toBe(SIZE.b);
    await putRuntime("pooled", 0);
    await until("pool of a destroyed", async () => (await unclaimed("a")).length === 0, FILL_MS);
    // The containers go first, then the rest of each stack (network, volume) and the stack itself.
    await until(
      "stacks of pool a destroyed",
      async () => {
        const stacks = await stacksOf(system);
        return before.every((name) => !stacks.some((s) => name.endsWith(s.split("--")[1] ?? "?")));
      },
      FILL_MS,
    );
    // What was claimed stays with its account.
    for (const name of claimed) expect((await containersOf(NS)).map((c) => c.name)).toContain(name);
  });
});
