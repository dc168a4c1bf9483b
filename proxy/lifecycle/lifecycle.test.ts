import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { defaultHandler } from "../testing/fake-runner.ts";
import { ADMIN_TOKEN, startTestServer, TEST_IMAGE, type TestServer } from "../testing/test-server.ts";

let t: TestServer;
beforeEach(async () => {
  t = await startTestServer();
});
afterEach(async () => {
  await t.close();
});

const provision = (client_request_id: string, extra: Record<string, unknown> = {}) =>
  t.rpc("ProvisionAgentWorkspace", { agent_ref: "alice", workstream: "main", client_request_id, ...extra });

describe("ProvisionAgentWorkspace", () => {
  it("is idempotent under concurrent retries: one workspace, one container_name, one provision command", async () => {
    const runner = await t.runner({
      handler: async (command) => {
        await new Promise((r) => setTimeout(r, 100)); // retries arrive while the first one runs
        return defaultHandler(command);
      },
    });
    const replies = await Promise.all(Array.from({ length: 5 }, () => provision("req-1")));
    const names = new Set(replies.map((r) => r.body.container_name));
    expect(replies.map((r) => r.status)).toEqual([200, 200, 200, 200, 200]);
    expect(names.size).toBe(1);
    expect(runner.commandsOf("provision")).toHaveLength(1);

    const later = await provision("req-1");
    expect(later.body).toEqual({ container_name: [...names][0], created: true });
    expect(runner.commandsOf("provision")).toHaveLength(1);
  });

  it("takes a request without client_request_id: no idempotency, each call provisions", async () => {
    const runner = await t.runner();
    const first = await t.rpc("ProvisionAgentWorkspace", { agent_ref: "alice", workstream: "main" });
    const second = await t.rpc("ProvisionAgentWorkspace", { agent_ref: "alice", workstream: "main" });
    expect([first.status, second.status]).toEqual([200, 200]);
    expect(second.body.container_name).toBe(first.body.container_name);
    expect(runner.commandsOf("provision")).toHaveLength(2);
  });

  it("names the container from agent, workstream and the request, as a DNS label", async () => {
    await t.runner();
    const reply = await provision("req-name");
    expect(reply.body.container_name).toMatch(/^as-default-alice-main-[0-9a-f]{8}$/);
  });

  it("sends the runner a SessionSpec built from the Agent and its runtime, with only the allowed credentials", async () => {
    const runner = await t.runner({ engine: "kubernetes" });
    await provision("req-spec");
    const [command] = runner.commandsOf("provision");
    expect(command?.spec).toMatchObject({
      namespace: "default",
      engine: "kubernetes",
      contract: "v1alpha2",
      streaming: true,
      env: { MODEL_BASE_URL: "http://10.213.0.1:11434/v1", MODEL_NAME: "tiny" },
      egress: [{ cidr: "10.213.0.1/32", port: 11434 }],
    });
    expect(command?.credentials).toEqual({ OPENAI_API_KEY: "sk-test" });
    expect(command?.adapter_token).toMatch(/^[A-Za-z0-9_-]{40,}$/);
  });

  it("reuses the agent's workspace for a new client_request_id, re-provisioning it and retiring its ERRORED session", async () => {
    const runner = await t.runner();
    const first = await provision("req-a");
    const container = first.body.container_name as string;
    const started = await t.rpc("StartAgentSession", { container_name: container });
    runner.state(started.body.session_id as string, "ERRORED", "ContainerRemoved");
    await waitForState(started.body.session_id as string, "ERRORED");

    const second = await provision("req-b");
    expect(second.body).toEqual({ container_name: container, created: false });
    expect(runner.commandsOf("provision")).toHaveLength(2);
    const status = await t.rpc("GetAgentStatus", { session_id: started.body.session_id });
    expect(status.body.sessions).toMatchObject([{ state: "STOPPED", reason: "Retired" }]);

    const resumed = await t.rpc("StartAgentSession", {
      container_name: container,
      resume_session_id: started.body.session_id,
    });
    expect(resumed.body).toEqual({ session_id: started.body.session_id, state: "READY" });
    expect(runner.commandsOf("start").at(-1)).toMatchObject({ resume: true });
  });

  it("refuses a v1alpha1 runtime with FAILED_PRECONDITION before anything is provisioned", async () => {
    const runner = await t.runner();
    await t.put("/v1/namespaces/default/agentruntimes/oneshot", {
      apiVersion: "agent-sessions.dev/v1alpha1",
      kind: "AgentRuntime",
      spec: { image: `r.example/x@sha256:${"b".repeat(64)}`, contract: "v1alpha1", approved: true },
    });
    await t.put("/v1/namespaces/default/agents/bob", {
      apiVersion: "agent-sessions.dev/v1alpha1",
      kind: "Agent",
      spec: { runtimeRef: "oneshot" },
    });
    const reply = await t.rpc("ProvisionAgentWorkspace", { agent_ref: "bob", client_request_id: "req-bob" });
    expect(reply.status).toBe(412);
    expect(reply.body).toMatchObject({ code: "FAILED_PRECONDITION" });
    expect(reply.body.message).toContain("v1alpha2");
    expect(runner.commands).toHaveLength(0);
  });

  it("is UNAVAILABLE when no runner is connected, and NOT_FOUND for an unknown agent", async () => {
    expect((await provision("req-x")).body).toMatchObject({ code: "UNAVAILABLE" });
    await t.runner();
    const unknown = await t.rpc("ProvisionAgentWorkspace", {
      agent_ref: "nobody",
      client_request_id: "req-y",
    });
    expect(unknown.status).toBe(404);
  });

  it("refuses a client_request_id reused for another workstream", async () => {
    await t.runner();
    await provision("req-same");
    const reused = await provision("req-same", { workstream: "other" });
    expect(reused.status).toBe(400);
    expect(reused.body.message).toContain("client_request_id");
  });

  it("keys client_request_id with the caller's agent: another namespace's same id is its own workspace", async () => {
    const runner = await t.runner();
    await t.put("/v1/namespaces/team-b/agentruntimes/reference", {
      apiVersion: "agent-sessions.dev/v1alpha1",
      kind: "AgentRuntime",
      metadata: { name: "reference" },
      spec: { image: TEST_IMAGE, contract: "v1alpha2" },
    });
    const bob = await t.put("/v1/namespaces/team-b/agents/alice", {
      apiVersion: "agent-sessions.dev/v1alpha1",
      kind: "Agent",
      metadata: { name: "alice" },
      spec: { runtimeRef: "reference" },
    });
    expect(bob.status).toBe(201);
    const ours = await provision("req-shared");
    const theirs = await provision("req-shared", { agent_ref: "team-b/alice" });
    expect([ours.status, theirs.status]).toEqual([200, 200]);
    expect(theirs.body.created).toBe(true);
    expect(theirs.body.container_name).not.toBe(ours.body.container_name);
    expect(runner.commandsOf("provision")).toHaveLength(2);
    // Each one's retry is still its own answer.
    expect((await provision("req-shared")).body).toEqual(ours.body);
    expect((await provision("req-shared", { agent_ref: "team-b/alice" })).body).toEqual(theirs.body);
    expect(runner.commandsOf("provision")).toHaveLength(2);
  });
});

describe("StartAgentSession", () => {
  it("returns a server-assigned session_id and publishes STARTING then READY", async () => {
    await t.runner();
    const container = (await provision("req-s")).body.container_name as string;
    const events = await t.events();
    const started = await t.rpc("StartAgentSession", { container_name: container });
    expect(started.status).toBe(200);
    expect(started.body.session_id).toMatch(/^ses-[0-9a-f]{20}$/);
    expect(started.body.state).toBe("READY");
    await events.until((e) => e.length >= 2);
    expect(events.frames()).toMatchObject([
      {
        protocol: "compass.v1",
        seq: 1,
        session_id: started.body.session_id,
        type: "status",
        payload: { state: "STARTING" },
      },
      { seq: 2, type: "status", payload: { state: "READY" } },
    ]);
  });

  it("rejects a second start with ALREADY_EXISTS and leaves the live session alone", async () => {
    const runner = await t.runner();
    const container = (await provision("req-two")).body.container_name as string;
    const first = await t.rpc("StartAgentSession", { container_name: container });
    const second = await t.rpc("StartAgentSession", { container_name: container });
    expect(second.status).toBe(409);
    expect(second.body).toMatchObject({
      code: "ALREADY_EXISTS",
      details: { session_id: first.body.session_id },
    });
    expect(runner.commandsOf("start")).toHaveLength(1);
    expect(runner.commandsOf("stop")).toHaveLength(0);
    const status = await t.rpc("GetAgentStatus", { session_id: first.body.session_id });
    expect(status.body.sessions).toMatchObject([{ state: "READY" }]);
  });

  it("is NOT_FOUND for an unknown container, and when the runner says its container is gone", async () => {
    const runner = await t.runner();
    expect((await t.rpc("StartAgentSession", { container_name: "as-default-nope" })).status).toBe(404);
    const container = (await provision("req-gone")).body.container_name as string;
    runner.handler = (c) =>
      c.kind === "start"
        ? { ok: false, error: { code: "NOT_FOUND", message: "no such container" } }
        : defaultHandler(c);
    const reply = await t.rpc("StartAgentSession", { container_name: container });
    expect(reply.status).toBe(404);
    const status = await t.rpc("GetAgentStatus", {});
    expect(status.body.sessions).toMatchObject([{ state: "ERRORED", reason: "ContainerNotFound" }]);
  });
});

describe("StopAgentSession", () => {
  it("is idempotent: unknown, live and already stopped sessions all end STOPPED, never ERRORED", async () => {
    const runner = await t.runner();
    expect((await t.rpc("StopAgentSession", { session_id: "ses-unknown" })).body).toEqual({
      session_id: "ses-unknown",
      state: "STOPPED",
    });
    const container = (await provision("req-stop")).body.container_name as string;
    const { session_id } = (await t.rpc("StartAgentSession", { container_name: container })).body;
    const events = await t.events(`?session_id=${session_id}`, "0");
    const stopped = await t.rpc("StopAgentSession", { session_id });
    expect(stopped.body).toEqual({ session_id, state: "STOPPED" });
    const again = await t.rpc("StopAgentSession", { session_id });
    expect(again.body).toEqual({ session_id, state: "STOPPED" });
    expect(runner.commandsOf("stop")).toHaveLength(1);
    await events.until((e) => e.length >= 4);
    expect(events.frames().map((f) => (f.payload as { state: string }).state)).toEqual([
      "STARTING",
      "READY",
      "STOPPING",
      "STOPPED",
    ]);
  });
});

describe("ReloadAgentSession", () => {
  it("stops then starts under the same session_id, never through ERRORED", async () => {
    const runner = await t.runner();
    const container = (await provision("req-reload")).body.container_name as string;
    const { session_id } = (await t.rpc("StartAgentSession", { container_name: container })).body;
    const events = await t.events(`?session_id=${session_id}`, "2");
    const reloaded = await t.rpc("ReloadAgentSession", { session_id });
    expect(reloaded.body).toEqual({ session_id, state: "READY" });
    expect(runner.commands.map((c) => c.kind)).toEqual(["provision", "start", "stop", "start"]);
    expect(runner.commandsOf("start")[1]).toMatchObject({ session_id, resume: true });
    await events.until((e) => e.length >= 4);
    expect(events.frames().map((f) => f.payload)).toEqual([
      { state: "STOPPING", reason: "Reload" },
      { state: "STOPPED", reason: "Reload" },
      { state: "STARTING" },
      { state: "READY" },
    ]);
  });

  it("is NOT_FOUND for an unknown session", async () => {
    expect((await t.rpc("ReloadAgentSession", { session_id: "ses-nope" })).status).toBe(404);
  });
});

describe("GetAgentStatus", () => {
  it("lists every retained session, ERRORED included", async () => {
    const runner = await t.runner();
    const a = (await provision("req-1")).body.container_name as string;
    const b = (
      await t.rpc("ProvisionAgentWorkspace", {
        agent_ref: "alice",
        workstream: "b",
        client_request_id: "req-2",
      })
    ).body.container_name as string;
    const one = (await t.rpc("StartAgentSession", { container_name: a })).body.session_id as string;
    const two = (await t.rpc("StartAgentSession", { container_name: b })).body.session_id as string;
    runner.state(two, "ERRORED", "OOMKilled");
    await waitForState(two, "ERRORED");
    const all = await t.rpc("GetAgentStatus", {});
    expect(all.body.sessions).toMatchObject([
      { session_id: one, state: "READY", agent_ref: "default/alice", container_name: a },
      { session_id: two, state: "ERRORED", reason: "OOMKilled" },
    ]);
  });
});

describe("SpawnAgent", () => {
  it("provisions and starts, then refuses a second live container for the account with ALREADY_EXISTS before provisioning", async () => {
    const runner = await t.runner();
    const spawned = await t.rpc("SpawnAgent", { agent_ref: "alice", client_request_id: "spawn-1" });
    expect(spawned.body).toMatchObject({ state: "READY" });
    const again = await t.rpc("SpawnAgent", {
      agent_ref: "alice",
      workstream: "other",
      client_request_id: "spawn-2",
    });
    expect(again.status).toBe(409);
    expect(again.body).toMatchObject({ code: "ALREADY_EXISTS" });
    expect(runner.commandsOf("provision")).toHaveLength(1);

    const retry = await t.rpc("SpawnAgent", { agent_ref: "alice", client_request_id: "spawn-1" });
    expect(retry.body).toEqual(spawned.body);
  });

  it("takes a request without client_request_id; a second one is ALREADY_EXISTS like any other", async () => {
    const runner = await t.runner();
    const spawned = await t.rpc("SpawnAgent", { agent_ref: "alice" });
    expect(spawned.status).toBe(200);
    expect(spawned.body).toMatchObject({ state: "READY" });
    const again = await t.rpc("SpawnAgent", { agent_ref: "alice" });
    expect(again.status).toBe(409);
    expect(runner.commandsOf("provision")).toHaveLength(1);
  });

  it('refuses with FAILED_PRECONDITION "agent errored; reload or stop it" before provisioning', async () => {
    const runner = await t.runner();
    const spawned = await t.rpc("SpawnAgent", { agent_ref: "alice", client_request_id: "spawn-e" });
    runner.state(spawned.body.session_id as string, "ERRORED", "AgentExited(1)");
    await waitForState(spawned.body.session_id as string, "ERRORED");
    const again = await t.rpc("SpawnAgent", {
      agent_ref: "default/alice",
      workstream: "new",
      client_request_id: "spawn-f",
    });
    expect(again.status).toBe(412);
    expect(again.body).toMatchObject({
      code: "FAILED_PRECONDITION",
      message: "agent errored; reload or stop it",
    });
    expect(runner.commandsOf("provision")).toHaveLength(1);

    await t.rpc("StopAgentSession", { session_id: spawned.body.session_id });
    const afterStop = await t.rpc("SpawnAgent", { agent_ref: "alice", client_request_id: "spawn-g" });
    expect(afterStop.body).toMatchObject({ state: "READY" });
  });
});

describe("RemoveAgentWorkspace", () => {
  it("removes on the runner, then forgets the workspace and its sessions; unknown is removed: false", async () => {
    const runner = await t.runner();
    const container = (await provision("req-rm")).body.container_name as string;
    await t.rpc("StartAgentSession", { container_name: container });
    const removed = await t.rpc("RemoveAgentWorkspace", { container_name: container });
    expect(removed.body).toEqual({ container_name: container, removed: true });
    expect(runner.commandsOf("remove")).toEqual([{ kind: "remove", container_name: container }]);
    expect((await t.rpc("GetAgentStatus", {})).body.sessions).toEqual([]);
    expect((await t.rpc("StartAgentSession", { container_name: container })).status).toBe(404);
    expect((await t.rpc("RemoveAgentWorkspace", { container_name: container })).body).toEqual({
      container_name: container,
      removed: false,
    });
  });
});

async function waitForState(sessionId: string, state: string): Promise<void> {
  const deadline = Date.now() + 5_000;
  for (;;) {
    const reply = await fetch(`${t.server.url}/v1/rpc/GetAgentStatus`, {
      method: "POST",
      headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
      body: JSON.stringify({ session_id: sessionId }),
    });
    const body = (await reply.json()) as { sessions?: { state: string }[] };
    if (body.sessions?.[0]?.state === state) return;
    if (Date.now() > deadline)
      throw new Error(`session ${sessionId} never became ${state}: ${JSON.stringify(body)}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}
