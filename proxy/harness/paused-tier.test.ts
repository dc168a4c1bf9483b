/**
 * The paused tier on the server (issue 37) against a fake runner: `desiredState: paused` pauses a
 * Ready session (phase Paused, Ready False reason Paused, status.pausedAt), `desiredState:
 * running` wakes it, a runner's budget evicts the least recently paused (reason Evicted), bad
 * input is a 400 that changes nothing, and a session on a Kubernetes runner is refused naming why.
 */
import { describe, expect, it } from "vitest";
import type { RunnerCommand } from "../../contracts/runner-protocol.ts";
import { until } from "../../test/support/until.ts";
import { defaultHandler, type FakeRunner } from "../testing/fake-runner.ts";
import { serverPerTest } from "../testing/test-server.ts";

// biome-ignore lint/suspicious/noExplicitAny: JSON bodies of many shapes, read by assertions
type Json = any;

const BASE = "/v1/namespaces/default/harnesssessions";
const t = serverPerTest();

function manifest(name: string, spec: Record<string, unknown> = {}) {
  return {
    apiVersion: "agent-sessions.dev/v1alpha1",
    kind: "HarnessSession",
    metadata: { name },
    spec: { agentRef: "alice", runtimeRef: "reference", ...spec },
  };
}

async function get(name: string): Promise<Json> {
  return (await t().call("GET", `${BASE}/${name}`)).body;
}

const inPhase = (name: string, phase: string) =>
  until(`${name} ${phase}`, async () => {
    const s = await get(name);
    return s.status.phase === phase ? s : undefined;
  });

async function readySession(name: string, spec: Record<string, unknown> = {}): Promise<Json> {
  expect((await t().call("PUT", `${BASE}/${name}`, manifest(name, spec))).status).toBe(201);
  return inPhase(name, "Ready");
}

const ready = (s: Json) => s.status.conditions.find((c: { type: string }) => c.type === "Ready");

describe("the paused tier: bad input is a 400 that changes nothing", () => {
  it.each([
    [
      "pauseAfter as long as idleTimeout",
      { idleTimeout: "5m", pauseAfter: "5m" },
      /shorter than spec.idleTimeout/,
    ],
    [
      "pauseAfter longer than idleTimeout",
      { idleTimeout: "5m", pauseAfter: "1h" },
      /shorter than spec.idleTimeout/,
    ],
    ["a negative pauseAfter", { pauseAfter: "-1m" }, /pauseAfter/],
    ["a garbage pauseAfter", { pauseAfter: "soon" }, /pauseAfter/],
    ["an unknown desiredState", { desiredState: "frozen" }, /desiredState/],
  ])("%s", async (_what, spec, message) => {
    await t().runner();
    const before = await readySession("s1", { idleTimeout: "15m" });
    const put = await t().call("PUT", `${BASE}/s1`, manifest("s1", spec));
    expect(put.status).toBe(400);
    expect(put.body.code).toBe("INVALID_ARGUMENT");
    expect(put.body.message).toMatch(message);
    const patch = await t().call("PATCH", `${BASE}/s1`, { spec });
    expect(patch.status).toBe(400);
    const after = await get("s1");
    expect(after.metadata.generation).toBe(before.metadata.generation);
    expect(after.spec).toEqual(before.spec);
    expect(after.status.phase).toBe("Ready");
  });

  it("a new session with bad pauseAfter is not created", async () => {
    const put = await t().call("PUT", `${BASE}/s2`, manifest("s2", { idleTimeout: "1m", pauseAfter: "2m" }));
    expect(put.status).toBe(400);
    expect((await t().call("GET", `${BASE}/s2`)).status).toBe(404);
  });
});

describe("the paused tier on a Kubernetes runner is refused, naming why", () => {
  it("desiredState: paused and pauseAfter of a session placed on Kubernetes are 400 and change nothing", async () => {
    await t().runner({ name: "k8s", engine: "kubernetes" });
    const before = await readySession("kube");
    for (const spec of [{ desiredState: "paused" }, { pauseAfter: "1m" }]) {
      const patch = await t().call("PATCH", `${BASE}/kube`, { spec });
      expect(patch.status).toBe(400);
      expect(patch.body.code).toBe("INVALID_ARGUMENT");
      expect(patch.body.message).toMatch(/Kubernetes runner k8s/);
      expect(patch.body.message).toMatch(/no freezer an unprivileged runner can use/);
      expect(patch.body.message).toMatch(/privileged pod or a hostPath/);
    }
    const after = await get("kube");
    expect(after.metadata.generation).toBe(before.metadata.generation);
    expect(after.status.phase).toBe("Ready");
  });

  it("a new session asking to pause when every runner is Kubernetes is refused", async () => {
    await t().runner({ name: "k8s", engine: "kubernetes" });
    const put = await t().call("PUT", `${BASE}/kube2`, manifest("kube2", { desiredState: "paused" }));
    expect(put.status).toBe(400);
    expect(put.body.message).toMatch(/every connected runner is a Kubernetes one \(k8s\)/);
    expect((await t().call("GET", `${BASE}/kube2`)).status).toBe(404);
  });
});

describe("the paused tier with a Docker and a Kubernetes runner: decided by the engine of the runner that holds (or would hold) the session", () => {
  const dockerRunner = (name = "dock") => t().runner({ name, engine: "docker", labels: { pool: "d" } });
  const kubeRunner = () => t().runner({ name: "kube", engine: "kubernetes", labels: { pool: "k" } });

  it("a session placed on the Kubernetes runner is refused desiredState paused and pauseAfter, naming why; nothing changes", async () => {
    const dock = await dockerRunner();
    await kubeRunner();
    const before = await readySession("on-kube", { runnerSelector: { pool: "k" } });
    for (const spec of [{ desiredState: "paused" }, { pauseAfter: "1m" }]) {
      const patch = await t().call("PATCH", `${BASE}/on-kube`, { spec });
      expect(patch.status).toBe(400);
      expect(patch.body.code).toBe("INVALID_ARGUMENT");
      expect(patch.body.message).toMatch(/on Kubernetes runner kube/);
      expect(patch.body.message).toMatch(/privileged pod or a hostPath/);
    }
    const after = await get("on-kube");
    expect(after.metadata.generation).toBe(before.metadata.generation);
    expect(after.spec).toEqual(before.spec);
    expect(after.status.phase).toBe("Ready");
    expect(dock.commandsOf("pause")).toEqual([]);
    // The same session placed on the Docker runner pauses.
    await readySession("on-dock", { runnerSelector: { pool: "d" } });
    expect((await t().call("PATCH", `${BASE}/on-dock`, { spec: { desiredState: "paused" } })).status).toBe(
      200,
    );
    await inPhase("on-dock", "Paused");
  });

  it("the runner holding the session is looked up by its id, not by a name another runner carries", async () => {
    const kube = await kubeRunner();
    // A Docker runner whose name is the Kubernetes runner's id.
    await t().runner({ name: kube.runnerId, engine: "docker", labels: { pool: "d" } });
    await readySession("by-id", { runnerSelector: { pool: "k" } });
    const patch = await t().call("PATCH", `${BASE}/by-id`, { spec: { desiredState: "paused" } });
    expect(patch.status).toBe(400);
    expect(patch.body.message).toMatch(/on Kubernetes runner kube/);
    expect((await get("by-id")).spec.desiredState).toBe("running");
  });

  it("a new session whose runnerSelector matches only the Kubernetes runner is refused, and not created", async () => {
    await dockerRunner();
    await kubeRunner();
    for (const spec of [
      { desiredState: "paused", runnerSelector: { pool: "k" } },
      { pauseAfter: "1m", runnerSelector: { pool: "k" } },
    ]) {
      const put = await t().call("PUT", `${BASE}/to-kube`, manifest("to-kube", spec));
      expect(put.status).toBe(400);
      expect(put.body.code).toBe("INVALID_ARGUMENT");
      expect(put.body.message).toMatch(
        /every connected runner matching runnerSelector \{pool=k\} is a Kubernetes one \(kube\)/,
      );
      expect((await t().call("GET", `${BASE}/to-kube`)).status).toBe(404);
    }
  });

  it("a new session asking for the paused tier with no selector is placed on the Docker runner, even when the Kubernetes one is less loaded", async () => {
    const dock = await dockerRunner();
    const kube = await kubeRunner();
    await readySession("first", { runnerSelector: { pool: "d" } });
    await readySession("pausing", { pauseAfter: "10m" });
    expect(dock.commandsOf("provision")).toHaveLength(2);
    expect(kube.commandsOf("provision")).toEqual([]);
    // Without the paused tier, placement goes by load: the Kubernetes runner.
    await readySession("plain");
    expect(kube.commandsOf("provision")).toHaveLength(1);
  });
});

describe("the paused tier on a Docker runner", () => {
  it("desiredState: paused pauses the session; desiredState: running wakes it", async () => {
    const runner = await t().runner();
    await readySession("p1");
    const patched = await t().call("PATCH", `${BASE}/p1`, { spec: { desiredState: "paused" } });
    expect(patched.status).toBe(200);
    const paused = await inPhase("p1", "Paused");
    expect(ready(paused)).toMatchObject({ status: "False", reason: "Paused" });
    expect(paused.status.pausedAt).toBe(ready(paused).lastTransitionTime);
    expect(runner.commandsOf("pause").map((c) => c.container_name)).toEqual([paused.status.containerName]);
    // No stack operation for a pause.
    expect(runner.commandsOf("scale_down")).toEqual([]);

    await t().call("PATCH", `${BASE}/p1`, { spec: { desiredState: "running" } });
    const woken = await inPhase("p1", "Ready");
    expect(woken.status.pausedAt).toBeUndefined();
    expect(runner.commandsOf("unpause").map((c) => c.container_name)).toEqual([woken.status.containerName]);
    expect(runner.commandsOf("provision")).toHaveLength(1);
  });

  it("the runner's budget evicts the least recently paused: Stopped, reason Evicted, never a running one", async () => {
    const runner: FakeRunner = await t().runner();
    const first = await readySession("old", { autoResume: true });
    await readySession("running-one");
    await t().call("PATCH", `${BASE}/old`, { spec: { desiredState: "paused" } });
    await inPhase("old", "Paused");
    // The next pause puts the runner over its budget: its memory read names `old` (and only paused ones).
    runner.handler = (command: RunnerCommand) =>
      command.kind === "paused_memory" && command.container_name !== first.status.containerName
        ? { ok: true, result: { memory_bytes: 1024, evict: [first.status.containerName] } }
        : defaultHandler(command);
    await readySession("new");
    await t().call("PATCH", `${BASE}/new`, { spec: { desiredState: "paused" } });
    const evicted = await inPhase("old", "Stopped");
    expect(ready(evicted)).toMatchObject({ status: "False", reason: "Evicted" });
    expect(ready(evicted).message).toMatch(/paused-memory budget/);
    expect(runner.commandsOf("scale_down").map((c) => c.container_name)).toEqual([
      first.status.containerName,
    ]);
    expect((await get("new")).status.phase).toBe("Paused");
    expect((await get("running-one")).status.phase).toBe("Ready");
  });

  it("Paused once frozen: neither the phase nor a wake right after waits for the runner's memory read", async () => {
    const runner = await t().runner();
    // The runner never answers the memory read (an engine stats read that hangs).
    runner.handler = (command: RunnerCommand) =>
      command.kind === "paused_memory" ? "no-reply" : defaultHandler(command);
    await readySession("quick");
    await t().call("PATCH", `${BASE}/quick`, { spec: { desiredState: "paused" } });
    const paused = await inPhase("quick", "Paused");
    await runner.until(() => runner.commandsOf("paused_memory").length > 0);
    expect(runner.commandsOf("paused_memory").map((c) => c.container_name)).toEqual([
      paused.status.containerName,
    ]);
    await t().call("PATCH", `${BASE}/quick`, { spec: { desiredState: "running" } });
    await inPhase("quick", "Ready");
    expect(runner.commandsOf("unpause")).toHaveLength(1);
  });

  it("a runner that cannot pause leaves the session Ready", async () => {
    const runner = await t().runner();
    runner.handler = (command: RunnerCommand) =>
      command.kind === "pause"
        ? { ok: false, error: { code: "FAILED_PRECONDITION", message: "no running container" } }
        : defaultHandler(command);
    await readySession("stubborn");
    await t().call("PATCH", `${BASE}/stubborn`, { spec: { desiredState: "paused" } });
    await runner.until(() => runner.commandsOf("pause").length > 0);
    await until("back to Ready", async () => {
      const s = await get("stubborn");
      return s.status.phase === "Ready" && runner.commandsOf("pause").length > 0 ? s : undefined;
    });
  });
});

describe("the paused tier follows what a reattaching runner reports (PROTOCOL.md §3)", () => {
  /** Until the server lists the fake runner as connected (or not). */
  const fakeConnected = (connected: boolean) =>
    until(connected ? "reattached" : "disconnected", async () => {
      const runners = (await t().call("GET", "/v1/runners")).body as Json;
      return runners.items?.find((r: Json) => r.runner_name === "fake")?.connected === connected
        ? true
        : undefined;
    });

  /** Kill the runner's link and dial again as the same runner, reporting `paused` for the session. */
  async function restarted(runner: FakeRunner, s: Json, paused: boolean): Promise<FakeRunner> {
    runner.kill();
    await fakeConnected(false);
    return t().runner({
      sessions: [
        { session_id: s.status.sessionId, container_name: s.status.containerName, state: "READY", paused },
      ],
    });
  }

  it("a Paused session whose workload the runner reports running is no longer shown Paused: desiredState paused freezes it again", async () => {
    const runner = await t().runner();
    await readySession("thawed");
    await t().call("PATCH", `${BASE}/thawed`, { spec: { desiredState: "paused" } });
    await inPhase("thawed", "Paused");
    const s = await get("thawed");
    const again = await restarted(runner, s, false);
    // Seen running, it is Ready (probed), then paused again as its spec asks: a new pause.
    await again.until(() => again.commandsOf("pause").length > 0);
    expect(again.commandsOf("probe").length).toBeGreaterThan(0);
    const paused = await inPhase("thawed", "Paused");
    expect(paused.status.sessionId).toBe(s.status.sessionId);
    expect(again.commandsOf("provision")).toEqual([]);
  });

  it("a Paused session whose workload the runner reports frozen stays Paused, nothing sent", async () => {
    const runner = await t().runner();
    await readySession("still");
    await t().call("PATCH", `${BASE}/still`, { spec: { desiredState: "paused" } });
    await inPhase("still", "Paused");
    const s = await get("still");
    const again = await restarted(runner, s, true);
    await until("reattached", async () =>
      (await get("still")).status.phase === "Paused" ? true : undefined,
    );
    expect(again.commandsOf("pause")).toEqual([]);
    expect(again.commandsOf("unpause")).toEqual([]);
  });

  it.each([
    ["frozen", true],
    ["running", false],
  ])(
    "a pause whose answer is lost with the runner's link stays Paused until the runner reattaches and reports its workload %s",
    async (_what, paused) => {
      const runner = await t().runner();
      // The runner freezes (or not) and dies before it answers.
      runner.handler = (command: RunnerCommand) =>
        command.kind === "pause" ? "no-reply" : defaultHandler(command);
      await readySession("cut");
      const s = await get("cut");
      await t().call("PATCH", `${BASE}/cut`, { spec: { desiredState: "paused" } });
      await runner.until(() => runner.commandsOf("pause").length > 0);
      runner.kill();
      await fakeConnected(false);
      // Not shown Ready while the engine may hold it frozen.
      expect((await get("cut")).status.phase).toBe("Paused");
      const again = await t().runner({
        sessions: [
          { session_id: s.status.sessionId, container_name: s.status.containerName, state: "READY", paused },
        ],
      });
      if (paused) {
        await fakeConnected(true);
        // What the hello brings is handled by now: nothing thawed, still Paused.
        await new Promise((r) => setTimeout(r, 300));
        expect((await get("cut")).status.phase).toBe("Paused");
        expect(again.commandsOf("unpause")).toEqual([]);
        expect(again.commandsOf("probe")).toEqual([]);
      } else {
        // Seen running: Ready (probed), then paused again as its spec asks.
        await again.until(() => again.commandsOf("pause").length > 0);
        expect(again.commandsOf("probe").length).toBeGreaterThan(0);
        await inPhase("cut", "Paused");
      }
      expect(again.commandsOf("provision")).toEqual([]);
    },
  );

  it("a Ready session whose workload the runner reports frozen is Paused, without a pause being sent", async () => {
    const runner = await t().runner();
    await readySession("frozen-unseen");
    const s = await get("frozen-unseen");
    const again = await restarted(runner, s, true);
    const paused = await inPhase("frozen-unseen", "Paused");
    expect(ready(paused)).toMatchObject({ status: "False", reason: "Paused" });
    expect(again.commandsOf("pause")).toEqual([]);
    // A wake thaws it on the runner.
    await t().call("PATCH", `${BASE}/frozen-unseen`, { spec: { desiredState: "running" } });
    await inPhase("frozen-unseen", "Ready");
    expect(again.commandsOf("unpause").map((c) => c.container_name)).toEqual([s.status.containerName]);
  });
});
