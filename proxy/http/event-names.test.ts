/**
 * Events by name (issue 42): every frame on `GET /v1/events` names its session's namespace and
 * HarnessSession (`namespace`, `name`), status transitions and PhaseChanged alike, against a real
 * server with an in-process runner over the real WebSocket; a token of another namespace still
 * sees none of them.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { EventFrame } from "../../contracts/compass.ts";
import { defaultHandler, type FakeRunner } from "../testing/fake-runner.ts";
import { SseClient } from "../testing/sse-client.ts";
import { ADMIN_TOKEN, startTestServer, TEST_IMAGE, type TestServer } from "../testing/test-server.ts";

let t: TestServer;
let runner: FakeRunner;

const AGENT_SPEC = {
  runtimeRef: "reference",
  credentials: [{ name: "OPENAI_API_KEY", value: "sk-test" }],
  model: { baseUrl: "http://10.213.0.1:11434/v1", name: "tiny" },
  egress: [{ cidr: "10.213.0.1/32", port: 11434 }],
};

function session(namespace: string, name: string, agentRef: string): Promise<{ status: number }> {
  return t.put(`/v1/namespaces/${namespace}/harnesssessions/${name}`, {
    apiVersion: "agent-sessions.dev/v1alpha1",
    kind: "HarnessSession",
    metadata: { name },
    spec: { agentRef, runtimeRef: "reference" },
  });
}

async function tokenFor(scope: string): Promise<string> {
  const made = await t.call("POST", "/v1/tokens", {
    name: `t-${scope.replace(/[^a-z0-9]/g, "-")}`,
    scopes: [scope],
  });
  expect(made.status).toBe(201);
  return made.body.token as string;
}

const stream = (token: string) =>
  SseClient.open(`${t.server.url}/v1/events`, { authorization: `Bearer ${token}` });

const isPhase = (f: EventFrame, phase: string) =>
  f.type === "log" && f.payload.event === "PhaseChanged" && f.payload.phase === phase;

beforeAll(async () => {
  t = await startTestServer();
  runner = await t.runner({
    handler: (command) =>
      command.kind === "probe"
        ? { ok: true, result: { endpoint: "10.0.0.9:8080" } }
        : defaultHandler(command),
  });
  const runtime = await t.put("/v1/namespaces/team-b/agentruntimes/reference", {
    apiVersion: "agent-sessions.dev/v1alpha1",
    kind: "AgentRuntime",
    metadata: { name: "reference" },
    spec: { image: TEST_IMAGE, contract: "v1alpha2" },
  });
  expect(runtime.status).toBe(201);
  const bob = await t.put("/v1/namespaces/team-b/agents/bob", {
    apiVersion: "agent-sessions.dev/v1alpha1",
    kind: "Agent",
    metadata: { name: "bob" },
    spec: AGENT_SPEC,
  });
  expect(bob.status).toBe(201);
});
afterAll(async () => {
  runner.kill();
  await t.close();
});

describe("GET /v1/events names each frame's namespace and HarnessSession", { timeout: 30_000 }, () => {
  it("every frame of a HarnessSession's agent session carries namespace and name; another namespace's token sees none", async () => {
    const admin = await stream(ADMIN_TOKEN);
    const teamB = await stream(await tokenFor("namespace:team-b:view"));
    expect(admin.status).toBe(200);
    expect(teamB.status).toBe(200);

    expect((await session("default", "chat", "alice")).status).toBe(201);
    await admin.until(() => admin.frames<EventFrame>().some((f) => f.name === "chat" && isPhase(f, "Ready")));
    const chat = admin.frames<EventFrame>().filter((f) => f.name === "chat");
    const sessionId = chat[0]?.session_id;
    // The status transitions (the runner's own frames, stored as they came) are named too.
    const ofSession = admin.frames<EventFrame>().filter((f) => f.session_id === sessionId);
    expect(ofSession.map((f) => f.type)).toContain("status");
    for (const f of ofSession) {
      expect(f.namespace).toBe("default");
      expect(f.name).toBe("chat");
      expect(f.protocol).toBe("compass.v1"); // additive: the frame's own fields as before
    }

    // team-b's token: its own session's frames (named), nothing of default's.
    expect((await session("team-b", "other", "bob")).status).toBe(201);
    await teamB.until(() => teamB.frames<EventFrame>().some((f) => isPhase(f, "Ready")));
    const seen = teamB.frames<EventFrame>();
    expect(seen.length).toBeGreaterThan(0);
    for (const f of seen) {
      expect(f.namespace).toBe("team-b");
      expect(f.name).toBe("other");
      expect(f.session_id).not.toBe(sessionId);
    }

    // Replayed from the store (Last-Event-ID 0), the same names.
    const replay = await SseClient.open(`${t.server.url}/v1/events?last_event_id=0`, {
      authorization: `Bearer ${ADMIN_TOKEN}`,
    });
    await replay.until(() => replay.frames<EventFrame>().some((f) => f.name === "other"));
    const replayed = replay.frames<EventFrame>().filter((f) => f.session_id === sessionId);
    expect(replayed.length).toBe(ofSession.length);
    for (const f of replayed) expect([f.namespace, f.name]).toEqual(["default", "chat"]);
    for (const c of [admin, teamB, replay]) c.close();
  });

  it("a session opened over the RPC API names its Agent's namespace and no HarnessSession", async () => {
    const admin = await stream(ADMIN_TOKEN);
    const provisioned = await t.rpc("ProvisionAgentWorkspace", {
      agent_ref: "default/alice",
      workstream: "rpc-only",
    });
    expect(provisioned.status).toBe(200);
    const started = await t.rpc("StartAgentSession", { container_name: provisioned.body.container_name });
    expect(started.status).toBe(200);
    const id = started.body.session_id as string;
    await admin.until(() => admin.frames<EventFrame>().some((f) => f.session_id === id));
    const frame = admin.frames<EventFrame>().find((f) => f.session_id === id);
    expect(frame?.namespace).toBe("default");
    expect(frame && "name" in frame).toBe(false);
    admin.close();
  });
});
