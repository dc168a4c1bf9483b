import fc from "fast-check";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import type { RunnerInfo } from "../../contracts/runners.ts";
import type { FakeRunner, FakeRunnerOptions } from "../testing/fake-runner.ts";
import { ADMIN_TOKEN, RUNNER_TOKEN, startTestServer, type TestServer } from "../testing/test-server.ts";
import { until } from "../../test/support/until.ts";

// biome-ignore lint/suspicious/noExplicitAny: JSON bodies of many shapes, read by assertions
type Json = any;

let t: TestServer;

beforeEach(async () => {
  t = await startTestServer({ idleCheckMs: 100 });
});
afterEach(async () => {
  await t.close();
});

async function call(method: string, path: string, body?: unknown, token = ADMIN_TOKEN) {
  const response = await fetch(`${t.server.url}${path}`, {
    method,
    headers: {
      ...(token ? { authorization: `Bearer ${token}` } : {}),
      ...(body !== undefined ? { "content-type": "application/json" } : {}),
    },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });
  return { status: response.status, body: (await response.json()) as Json };
}

async function runners(): Promise<Record<string, RunnerInfo>> {
  const listed = await call("GET", "/v1/runners");
  expect(listed.status).toBe(200);
  return Object.fromEntries((listed.body.items as RunnerInfo[]).map((r) => [r.runner_name, r]));
}

/** A fake runner, attached and reconciled (it takes placements) when this resolves. */
async function attach(options: FakeRunnerOptions & { name: string }): Promise<FakeRunner> {
  const runner = await t.runner(options);
  await until(`${options.name} connected`, async () =>
    (await runners())[options.name]?.connected ? true : undefined,
  );
  return runner;
}

async function agent(name: string): Promise<void> {
  const put = await t.put(`/v1/namespaces/default/agents/${name}`, {
    apiVersion: "agent-sessions.dev/v1alpha1",
    kind: "Agent",
    metadata: { name },
    spec: { runtimeRef: "reference" },
  });
  expect(put.status).toBe(201);
}

/** An RPC with its body as loose JSON. */
const rpc = async (method: string, body: unknown): Promise<{ status: number; body: Json }> =>
  t.rpc(method, body);

const provision = (agent_ref: string, runner_selector?: Record<string, string>) =>
  rpc("ProvisionAgentWorkspace", {
    agent_ref,
    client_request_id: "",
    ...(runner_selector ? { runner_selector } : {}),
  });

describe("runner admin API and label placement", () => {
  it("lists every runner with the capacity and labels it advertised, its load, connection and drain state", async () => {
    expect((await call("GET", "/v1/runners")).body).toEqual({ metadata: {}, items: [] });
    const a = await attach({ name: "a", capacity: 1, labels: { zone: "a", disk: "ssd" } });
    await attach({ name: "b", capacity: 2, labels: { zone: "b" } });
    const listed = await runners();
    expect(listed.a).toMatchObject({
      runner_id: a.runnerId,
      engine: "docker",
      capacity: 1,
      labels: { zone: "a", disk: "ssd" },
      load: 0,
      live_sessions: 0,
      connected: true,
      draining: false,
    });
    expect(listed.b).toMatchObject({ capacity: 2, labels: { zone: "b" }, connected: true });
    // One runner by name or by id.
    expect((await call("GET", "/v1/runners/a")).body).toEqual(listed.a);
    expect((await call("GET", `/v1/runners/${a.runnerId}`)).body).toEqual(listed.a);
  });

  it("places a workspace only on a runner whose labels match runner_selector", async () => {
    const a = await attach({ name: "a", capacity: 5, labels: { zone: "a" } });
    const b = await attach({ name: "b", capacity: 5, labels: { zone: "b" } });
    await agent("bob");
    // b is the busier one: without a selector the workspace would go to a.
    const first = await provision("alice", { zone: "b" });
    expect(first.status, JSON.stringify(first.body)).toBe(200);
    const second = await provision("bob", { zone: "b" });
    expect(second.status, JSON.stringify(second.body)).toBe(200);
    expect(b.commandsOf("provision").map((c) => c.container_name)).toEqual([
      first.body.container_name,
      second.body.container_name,
    ]);
    expect(a.commandsOf("provision")).toEqual([]);
    expect((await runners()).b?.load).toBe(2);
  });

  it("refuses a selector no runner matches with FAILED_PRECONDITION naming it, and changes nothing", async () => {
    const a = await attach({ name: "a", labels: { zone: "a" } });
    const refused = await provision("alice", { zone: "c" });
    expect(refused.status).toBe(412);
    expect(refused.body).toEqual({
      code: "FAILED_PRECONDITION",
      message: "no connected runner matches runnerSelector {zone=c}; connected: a {zone=a}",
      details: { reason: "Unschedulable", runner_selector: { zone: "c" } },
    });
    const spawn = await rpc("SpawnAgent", {
      agent_ref: "alice",
      client_request_id: "s1",
      runner_selector: { zone: "c" },
    });
    expect(spawn.status).toBe(412);
    expect(a.commands).toEqual([]);
    expect((await runners()).a?.load).toBe(0);
    expect((await rpc("GetAgentStatus", {})).body.sessions).toEqual([]);
    // The same client_request_id works once a selector matches: the refusal claimed nothing.
    const retried = await rpc("SpawnAgent", {
      agent_ref: "alice",
      client_request_id: "s1",
      runner_selector: { zone: "a" },
    });
    expect(retried.status, JSON.stringify(retried.body)).toBe(200);
  });

  it("rejects malformed selectors with INVALID_ARGUMENT", async () => {
    await attach({ name: "a", labels: { zone: "a" } });
    for (const runner_selector of [{ "bad key": "x" }, { zone: "no spaces" }, { zone: 1 }, "zone=a"]) {
      const refused = await rpc("ProvisionAgentWorkspace", {
        agent_ref: "alice",
        client_request_id: "",
        runner_selector,
      });
      expect(refused.status, JSON.stringify(runner_selector)).toBe(400);
      expect(refused.body.code).toBe("INVALID_ARGUMENT");
    }
  });

  it("concurrent placements never put more workspaces on a runner than its capacity", async () => {
    const a = await attach({ name: "a", capacity: 2, labels: { zone: "a" } });
    const replies = await Promise.all(
      Array.from({ length: 6 }, (_, i) =>
        rpc("ProvisionAgentWorkspace", {
          agent_ref: "alice",
          workstream: `w${i}`,
          client_request_id: `c${i}`,
        }),
      ),
    );
    expect(replies.map((r) => r.status).sort()).toEqual([200, 200, 429, 429, 429, 429]);
    expect(a.commandsOf("provision")).toHaveLength(2);
    expect((await runners()).a?.load).toBe(2);
  });

  it("drain: no new placement on the runner, its live session untouched; undrain lifts it", async () => {
    const a = await attach({ name: "a", capacity: 1, labels: { zone: "a" } });
    const b = await attach({ name: "b", capacity: 5, labels: { zone: "b" } });
    await agent("bob");
    await agent("carol");
    const spawned = await rpc("SpawnAgent", {
      agent_ref: "alice",
      client_request_id: "",
      runner_selector: { zone: "b" },
    });
    expect(spawned.body.state).toBe("READY");
    const commandsBefore = b.commands.length;

    const drained = await call("POST", "/v1/runners/b:drain");
    expect(drained.status).toBe(200);
    expect(drained.body).toMatchObject({
      runner_name: "b",
      draining: true,
      connected: true,
      load: 1,
      live_sessions: 1,
    });
    // Idempotent.
    expect((await call("POST", "/v1/runners/b:drain")).body.draining).toBe(true);
    // Nothing was sent to b, and its session is as it was.
    expect(b.commands.length).toBe(commandsBefore);
    const status = await rpc("GetAgentStatus", { session_id: spawned.body.session_id });
    expect(status.body.sessions[0]).toMatchObject({ state: "READY", runner_id: b.runnerId });
    // ... and still takes requests.
    const sent = await rpc("SendAgentMessage", {
      session_id: spawned.body.session_id,
      message: { type: "message", text: "hi" },
    });
    expect(sent.status, JSON.stringify(sent.body)).toBe(200);
    expect(b.commandsOf("send")).toHaveLength(1);

    // New placements: a selector only b matches is refused; without one, a (busier relative to b) takes it.
    const refused = await provision("bob", { zone: "b" });
    expect(refused.status).toBe(412);
    expect(refused.body.message).toBe(
      "every connected runner matching runnerSelector {zone=b} is draining: b",
    );
    const placed = await provision("bob");
    expect(placed.status, JSON.stringify(placed.body)).toBe(200);
    expect(a.commandsOf("provision").map((c) => c.container_name)).toEqual([placed.body.container_name]);
    // a is full (capacity 1) and b drains: RESOURCE_EXHAUSTED saying both.
    const full = await provision("carol");
    expect(full.status).toBe(429);
    expect(full.body).toMatchObject({
      code: "RESOURCE_EXHAUSTED",
      message: "every connected runner that takes placements is at capacity: a (1/1); draining: b",
    });
    expect(b.commandsOf("provision")).toHaveLength(1);

    const undrained = await call("POST", "/v1/runners/b:undrain");
    expect(undrained.body).toMatchObject({ runner_name: "b", draining: false });
    const afterUndrain = await provision("carol");
    expect(afterUndrain.status, JSON.stringify(afterUndrain.body)).toBe(200);
    expect(b.commandsOf("provision")).toHaveLength(2);
  });

  it("keeps the drain flag across a server restart and a runner's reconnect", async () => {
    const b = await attach({ name: "b", labels: { zone: "b" } });
    expect((await call("POST", "/v1/runners/b:drain")).status).toBe(200);
    b.kill();
    await t.stop();
    t = await startTestServer({ dataDir: t.dataDir }, { agent: false });
    expect((await runners()).b).toMatchObject({ draining: true, connected: false, labels: { zone: "b" } });
    await attach({ name: "b", labels: { zone: "b", new: "label" } });
    expect((await runners()).b).toMatchObject({
      draining: true,
      connected: true,
      labels: { zone: "b", new: "label" },
    });
    const refused = await provision("alice");
    expect(refused.body).toMatchObject({
      code: "FAILED_PRECONDITION",
      message: "every connected runner is draining: b",
    });
  });

  it("answers coded errors for unknown runners, actions and callers, changing nothing", async () => {
    await attach({ name: "a" });
    expect(await call("POST", "/v1/runners/nobody:drain")).toMatchObject({
      status: 404,
      body: { code: "NOT_FOUND", message: "no runner named nobody has attached to this server" },
    });
    expect(await call("GET", "/v1/runners/nobody")).toMatchObject({ status: 404 });
    expect(await call("POST", "/v1/runners/a:explode")).toMatchObject({
      status: 400,
      body: { code: "INVALID_ARGUMENT" },
    });
    expect(await call("POST", "/v1/runners/a")).toMatchObject({ status: 404, body: { code: "NOT_FOUND" } });
    expect(await call("POST", "/v1/runners/bad%20name:drain")).toMatchObject({
      status: 400,
      body: { code: "INVALID_ARGUMENT" },
    });
    expect(await call("POST", "/v1/runners/a:drain", undefined, RUNNER_TOKEN)).toMatchObject({
      status: 403,
      body: { code: "PERMISSION_DENIED" },
    });
    expect(await call("GET", "/v1/runners", undefined, "")).toMatchObject({
      status: 401,
      body: { code: "UNAUTHENTICATED" },
    });
    expect((await runners()).a?.draining).toBe(false);
  });

  it("losing one runner affects only its own sessions; the other runner's keep taking requests", async () => {
    const a = await attach({ name: "a", labels: { zone: "a" } });
    const b = await attach({ name: "b", labels: { zone: "b" } });
    await agent("bob");
    const onA = await rpc("SpawnAgent", {
      agent_ref: "alice",
      client_request_id: "",
      runner_selector: { zone: "a" },
    });
    const onB = await rpc("SpawnAgent", {
      agent_ref: "bob",
      client_request_id: "",
      runner_selector: { zone: "b" },
    });
    expect([onA.body.state, onB.body.state]).toEqual(["READY", "READY"]);
    a.kill();
    const state = async (id: string) =>
      (await rpc("GetAgentStatus", { session_id: id })).body.sessions[0] as {
        state: string;
        reason?: string;
      };
    await until("a's session DISCONNECTED", async () =>
      (await state(onA.body.session_id)).state === "DISCONNECTED" ? true : undefined,
    );
    expect(await state(onB.body.session_id)).toMatchObject({ state: "READY" });
    const sent = await rpc("SendAgentMessage", {
      session_id: onB.body.session_id,
      message: { type: "message", text: "still here" },
    });
    expect(sent.status, JSON.stringify(sent.body)).toBe(200);
    expect(b.commandsOf("send")).toHaveLength(1);
    expect((await runners()).a?.connected).toBe(false);
    // The reattach window (5 s in tests) closes: only a's session is ERRORED.
    await until("a's session ERRORED", async () =>
      (await state(onA.body.session_id)).state === "ERRORED" ? true : undefined,
    );
    expect(await state(onA.body.session_id)).toMatchObject({ state: "ERRORED", reason: "ReattachExpired" });
    expect(await state(onB.body.session_id)).toMatchObject({ state: "READY" });
  }, 20_000);
});

describe("runner admin API and selectors under arbitrary input (fast-check)", () => {
  it("any runner path and action, any runner_selector: a coded 4xx or success, never a 5xx, and a refusal changes nothing", async () => {
    const a = await attach({ name: "a", capacity: 100, labels: { zone: "a" } });
    const segment = fc.oneof(
      fc.constantFrom("a", "nobody", "", "a:b", "..", "%2F", "x".repeat(200)),
      fc.string({ maxLength: 20 }),
    );
    const action = fc.oneof(fc.constantFrom("drain", "undrain", "", "explode"), fc.string({ maxLength: 10 }));
    await fc.assert(
      fc.asyncProperty(segment, action, fc.boolean(), async (name, verb, withColon) => {
        const before = (await runners()).a?.draining;
        const path = `/v1/runners/${encodeURIComponent(name)}${withColon ? `:${encodeURIComponent(verb)}` : ""}`;
        const reply = await call("POST", path);
        expect(reply.status, path).toBeLessThan(500);
        if (reply.status >= 400) {
          expect(typeof reply.body.code, path).toBe("string");
          expect((await runners()).a?.draining, path).toBe(before);
        }
        const got = await call("GET", path);
        expect(got.status, path).toBeLessThan(500);
      }),
      { numRuns: 150 },
    );
    await call("POST", "/v1/runners/a:undrain");
    const selector = fc.oneof(
      fc.dictionary(fc.string({ maxLength: 12 }), fc.string({ maxLength: 12 }), { maxKeys: 20 }),
      fc.dictionary(fc.constantFrom("zone", "disk", "example.com/tier"), fc.constantFrom("a", "b", ""), {
        maxKeys: 3,
      }),
      fc.jsonValue({ maxDepth: 2 }),
    );
    let placed = 0;
    await fc.assert(
      fc.asyncProperty(selector, async (runner_selector) => {
        const loadBefore = (await runners()).a?.load ?? 0;
        const reply = await rpc("ProvisionAgentWorkspace", {
          agent_ref: "alice",
          workstream: `w${placed}`,
          client_request_id: "",
          runner_selector,
        });
        expect(reply.status, JSON.stringify(runner_selector)).toBeLessThan(500);
        if (reply.status === 200) placed += 1;
        else expect((await runners()).a?.load).toBe(loadBefore);
      }),
      { numRuns: 150 },
    );
    // Only selectors a's labels satisfy were placed, each on a.
    expect(placed).toBeGreaterThan(0);
    expect(a.commandsOf("provision")).toHaveLength(placed);
  }, 120_000);
});

describe("HarnessSession spec.runnerSelector", () => {
  const manifest = (name: string, runnerSelector?: Record<string, string>) => ({
    apiVersion: "agent-sessions.dev/v1alpha1",
    kind: "HarnessSession",
    metadata: { name },
    spec: { agentRef: "alice", runtimeRef: "reference", ...(runnerSelector ? { runnerSelector } : {}) },
  });
  const session = async (name: string) =>
    (await call("GET", `/v1/namespaces/default/harnesssessions/${name}`)).body;

  it("stays Pending (Unschedulable, naming the selector) until a matching runner attaches, then goes there", async () => {
    const a = await attach({ name: "a", labels: { zone: "a" } });
    const created = await call(
      "PUT",
      "/v1/namespaces/default/harnesssessions/gpu",
      manifest("gpu", { gpu: "true" }),
    );
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    expect(created.body.spec.runnerSelector).toEqual({ gpu: "true" });
    const pending = await until("Unschedulable", async () => {
      const s = await session("gpu");
      return s.status.conditions.find((c: Json) => c.reason === "Unschedulable") ? s : undefined;
    });
    expect(pending.status.phase).toBe("Pending");
    expect(pending.status.conditions.find((c: Json) => c.type === "Ready")).toMatchObject({
      status: "False",
      reason: "Unschedulable",
      message: expect.stringContaining("no connected runner matches runnerSelector {gpu=true}"),
    });
    expect(a.commands).toEqual([]);

    const gpu = await attach({ name: "gpu-1", labels: { gpu: "true" } });
    const ready = await until("Ready on gpu-1", async () => {
      const s = await session("gpu");
      return s.status.phase === "Ready" ? s : undefined;
    });
    expect(gpu.commandsOf("provision").map((c) => c.container_name)).toEqual([ready.status.containerName]);
    expect(a.commands).toEqual([]);
  });

  it("rejects a malformed runnerSelector with INVALID_ARGUMENT and stores nothing", async () => {
    const refused = await call(
      "PUT",
      "/v1/namespaces/default/harnesssessions/bad",
      manifest("bad", { "a b": "c" }),
    );
    expect(refused.status).toBe(400);
    expect(refused.body.code).toBe("INVALID_ARGUMENT");
    expect((await call("GET", "/v1/namespaces/default/harnesssessions/bad")).status).toBe(404);
  });
});
