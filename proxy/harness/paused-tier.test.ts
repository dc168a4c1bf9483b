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
    expect(put.body.message).toMatch(/every runner is a Kubernetes one/);
    expect((await t().call("GET", `${BASE}/kube2`)).status).toBe(404);
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
    // The next pause puts the runner over its budget: it names `old` (and only paused ones).
    runner.handler = (command: RunnerCommand) =>
      command.kind === "pause" && command.container_name !== first.status.containerName
        ? { ok: true, result: { paused: true, evict: [first.status.containerName] } }
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
