import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { parseConfig } from "../config.ts";
import { NamespaceQuotas } from "./namespace-quotas.ts";
import { type CommandHandler, defaultHandler } from "../testing/fake-runner.ts";
import { startTestServer, TEST_IMAGE, type TestServer } from "../testing/test-server.ts";
import { until } from "../../test/support/until.ts";

const API = "agent-sessions.dev/v1alpha1";
let t: TestServer | undefined;
afterEach(async () => {
  await t?.close();
  t = undefined;
});

const harness = (name: string, agentRef = "alice") => ({
  apiVersion: API,
  kind: "HarnessSession",
  metadata: { name },
  spec: { agentRef, runtimeRef: "reference" },
});

async function call(server: TestServer, method: string, path: string, body?: unknown) {
  const response = await fetch(`${server.server.url}${path}`, {
    method,
    headers: {
      authorization: `Bearer ${server.server.config.adminToken}`,
      "content-type": "application/json",
    },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });
  return { status: response.status, body: (await response.json()) as Record<string, unknown> };
}

/** A refusal a user can act on: 429 RESOURCE_EXHAUSTED naming the namespace, the quota and the setting. */
function expectQuotaRefusal(
  reply: { status: number; body: Record<string, unknown> },
  namespace: string,
  setting: string,
) {
  expect(reply.status).toBe(429);
  expect(reply.body).toMatchObject({
    code: "RESOURCE_EXHAUSTED",
    details: { namespace, setting },
  });
  expect(reply.body.message).toMatch(new RegExp(`namespace ${namespace} .*quota of \\d+ .*${setting}`));
}

describe("namespace quota settings", () => {
  it("take N for every namespace or ns=N with *=N for the rest, and refuse anything else naming the setting", () => {
    const dir = mkdtempSync(join(tmpdir(), "agent-sessions-quota-"));
    try {
      const config = parseConfig({
        AGENT_SESSIONS_DATA_DIR: dir,
        AGENT_SESSIONS_NAMESPACE_MAX_SESSIONS: "team-a=2,*=10",
        AGENT_SESSIONS_NAMESPACE_MAX_WARM_POOL_ENTRIES: "4",
      });
      const quotas = new NamespaceQuotas(config.namespaceQuotas);
      expect(quotas.limit("sessions", "team-a")).toBe(2);
      expect(quotas.limit("sessions", "other")).toBe(10);
      expect(quotas.limit("warmPoolEntries", "any")).toBe(4);
      expect(quotas.limit("agentRuns", "any")).toBeUndefined();
      expect(
        new NamespaceQuotas(parseConfig({ AGENT_SESSIONS_DATA_DIR: dir }).namespaceQuotas).limit(
          "sessions",
          "x",
        ),
      ).toBeUndefined();
      for (const bad of ["team-a=", "Team=1", "-1", "a=1=2", "1.5"])
        expect(() =>
          parseConfig({ AGENT_SESSIONS_DATA_DIR: dir, AGENT_SESSIONS_NAMESPACE_MAX_SESSIONS: bad }),
        ).toThrow(/AGENT_SESSIONS_NAMESPACE_MAX_SESSIONS/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe("per-namespace session quota", () => {
  it("refuses a new HarnessSession over the quota with 429 and stores nothing; replacing one and other namespaces go on", async () => {
    t = await startTestServer({ namespaceQuotas: { sessions: { byNamespace: { default: 1 } } } });
    await t.runner();
    expect((await call(t, "PUT", "/v1/namespaces/default/harnesssessions/one", harness("one"))).status).toBe(
      201,
    );
    const refused = await call(t, "PUT", "/v1/namespaces/default/harnesssessions/two", harness("two"));
    expectQuotaRefusal(refused, "default", "AGENT_SESSIONS_NAMESPACE_MAX_SESSIONS");
    expect((await call(t, "GET", "/v1/namespaces/default/harnesssessions/two")).status).toBe(404);
    // The session inside the quota provisions its own workspace (counted once) and comes Ready.
    await until("HarnessSession one Ready", async () => {
      const one = await call(t as TestServer, "GET", "/v1/namespaces/default/harnesssessions/one");
      return (one.body.status as { phase?: string } | undefined)?.phase === "Ready" || undefined;
    });
    const replaced = await call(t, "PUT", "/v1/namespaces/default/harnesssessions/one", {
      ...harness("one"),
      spec: { ...harness("one").spec, idleTimeout: "10m" },
    });
    expect(replaced.status).toBe(200);
    // Another namespace has no quota here.
    await t.put("/v1/namespaces/team-b/agentruntimes/reference", {
      apiVersion: API,
      kind: "AgentRuntime",
      metadata: { name: "reference" },
      spec: { image: TEST_IMAGE, contract: "v1alpha2", capabilities: ["streaming"] },
    });
    await t.put("/v1/namespaces/team-b/agents/alice", {
      apiVersion: API,
      kind: "Agent",
      metadata: { name: "alice" },
      spec: { runtimeRef: "reference" },
    });
    expect((await call(t, "PUT", "/v1/namespaces/team-b/harnesssessions/two", harness("two"))).status).toBe(
      201,
    );
  });

  it("refuses SpawnAgent and ProvisionAgentWorkspace over the quota before anything is provisioned, and admits again once one is removed", async () => {
    t = await startTestServer({ namespaceQuotas: { sessions: { every: 2 } } });
    const runner = await t.runner();
    // SpawnAgent keeps one live session per account: bob spawns while alice's HarnessSession runs.
    await t.put("/v1/namespaces/default/agents/bob", {
      apiVersion: API,
      kind: "Agent",
      metadata: { name: "bob" },
      spec: { runtimeRef: "reference" },
    });
    const first = await t.rpc("ProvisionAgentWorkspace", {
      agent_ref: "alice",
      workstream: "a",
      client_request_id: "r1",
    });
    expect(first.status).toBe(200);
    expect(
      (await call(t, "PUT", "/v1/namespaces/default/harnesssessions/chat", harness("chat"))).status,
    ).toBe(201);
    const provisions = () => runner.commandsOf("provision").length;
    await until("two provisions", () => provisions() === 2 || undefined);

    const spawn = await t.rpc("SpawnAgent", { agent_ref: "bob", workstream: "b", client_request_id: "r2" });
    expectQuotaRefusal(spawn, "default", "AGENT_SESSIONS_NAMESPACE_MAX_SESSIONS");
    const provision = await t.rpc("ProvisionAgentWorkspace", { agent_ref: "default/alice", workstream: "c" });
    expectQuotaRefusal(provision, "default", "AGENT_SESSIONS_NAMESPACE_MAX_SESSIONS");
    expect(spawn.body.details).toMatchObject({ quota: "sessions", limit: 2, used: 2 });
    expect(provisions()).toBe(2);
    // A workspace already counted is re-provisioned under its name.
    expect((await t.rpc("ProvisionAgentWorkspace", { agent_ref: "alice", workstream: "a" })).status).toBe(
      200,
    );

    await t.rpc("RemoveAgentWorkspace", { container_name: first.body.container_name });
    expect(
      (await t.rpc("SpawnAgent", { agent_ref: "bob", workstream: "b", client_request_id: "r3" })).status,
    ).toBe(200);
  });

  it("never admits more than the quota when creations race", async () => {
    t = await startTestServer({ namespaceQuotas: { sessions: { every: 3 } } });
    await t.runner();
    const server = t;
    const replies = await Promise.all([
      ...Array.from({ length: 4 }, (_, i) =>
        server.rpc("ProvisionAgentWorkspace", { agent_ref: "alice", workstream: `w${i}` }),
      ),
      ...Array.from({ length: 4 }, (_, i) =>
        call(server, "PUT", `/v1/namespaces/default/harnesssessions/s${i}`, harness(`s${i}`)),
      ),
    ]);
    expect(replies.filter((r) => r.status === 200 || r.status === 201)).toHaveLength(3);
    expect(replies.filter((r) => r.status === 429)).toHaveLength(5);
  });
});

describe("per-namespace warm pool quota", () => {
  it("refuses an AgentRuntime or Agent write that would take the namespace's pools over the quota, storing nothing", async () => {
    t = await startTestServer({ namespaceQuotas: { warmPoolEntries: { every: 3 } } });
    const runtime = (size: number) => ({
      apiVersion: API,
      kind: "AgentRuntime",
      metadata: { name: "reference" },
      spec: { image: TEST_IMAGE, contract: "v1alpha2", capabilities: ["streaming"], warmPool: { size } },
    });
    expect((await t.put("/v1/namespaces/default/agentruntimes/reference", runtime(2))).status).toBe(200);
    const tooBig = await t.put("/v1/namespaces/default/agentruntimes/reference", runtime(4));
    expectQuotaRefusal(tooBig, "default", "AGENT_SESSIONS_NAMESPACE_MAX_WARM_POOL_ENTRIES");
    const stored = await call(t, "GET", "/v1/namespaces/default/agentruntimes/reference");
    expect(stored.body.spec).toMatchObject({ warmPool: { size: 2 } });
    // alice takes 2; a second Agent on the same runtime would take 2 more.
    const bob = await t.put("/v1/namespaces/default/agents/bob", {
      apiVersion: API,
      kind: "Agent",
      metadata: { name: "bob" },
      spec: { runtimeRef: "reference" },
    });
    expectQuotaRefusal(bob, "default", "AGENT_SESSIONS_NAMESPACE_MAX_WARM_POOL_ENTRIES");
    expect((await call(t, "GET", "/v1/namespaces/default/agents/bob")).status).toBe(404);
    // Writes that do not add entries are never refused.
    expect((await t.put("/v1/namespaces/default/agentruntimes/reference", runtime(1))).status).toBe(200);
  });
});

describe("per-namespace AgentRun quota", () => {
  it("refuses a run over the namespace's runs at once, naming the setting, and runs again once one ends", async () => {
    t = await startTestServer({ namespaceQuotas: { agentRuns: { byNamespace: { default: 1 } } } });
    await t.put("/v1/namespaces/default/agentruntimes/legacy", {
      apiVersion: API,
      kind: "AgentRuntime",
      metadata: { name: "legacy" },
      spec: { image: TEST_IMAGE, contract: "v1alpha1" },
    });
    await t.put("/v1/namespaces/default/agents/bob", {
      apiVersion: API,
      kind: "Agent",
      metadata: { name: "bob" },
      spec: { runtimeRef: "legacy" },
    });
    const gates: (() => void)[] = [];
    const handler: CommandHandler = (command) =>
      command.kind === "run_once"
        ? new Promise((resolve) => {
            gates.push(() =>
              resolve({ ok: true, result: { exit_code: 0, output: "done\n", timed_out: false } } as never),
            );
          })
        : defaultHandler(command);
    await t.runner({ capacity: 10, handler });
    const server = t;
    const run = () =>
      call(server, "POST", "/v1/namespaces/default/agentruns", {
        apiVersion: API,
        kind: "AgentRun",
        spec: { agentRef: "bob", input: "hi" },
      });
    const first = run();
    await until("one run held", () => gates.length === 1 || undefined);
    expectQuotaRefusal(await run(), "default", "AGENT_SESSIONS_NAMESPACE_MAX_AGENT_RUNS");
    gates[0]?.();
    expect((await first).status).toBe(201);
    const again = run();
    await until("two runs held", () => gates.length === 2 || undefined);
    gates[1]?.();
    expect((await again).status).toBe(201);
  });
});
