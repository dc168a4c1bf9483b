import { afterEach, describe, expect, it } from "vitest";
import { API_VERSION, type Agent } from "../../contracts/resources.ts";
import { GatewayGrant } from "../../contracts/runner-protocol.ts";
import { type CommandHandler, defaultHandler, type FakeRunner } from "../testing/fake-runner.ts";
import { startTestServer, TEST_IMAGE, type TestServer } from "../testing/test-server.ts";
import { gatewayGrantOf } from "./gateway-grant.ts";

const agent = (spec: Partial<Agent["spec"]>): Agent => ({
  apiVersion: API_VERSION,
  kind: "Agent",
  metadata: { name: "bob", namespace: "team-a" },
  spec: { runtimeRef: "reference", credentials: [], egress: [], ...spec },
});
const model = { baseUrl: "https://10.0.0.9/v1", name: "tiny" };

describe("gatewayGrantOf", () => {
  it("grants the Agent's endpoint, allowed models and budgets, keyed namespace/name", () => {
    const grant = gatewayGrantOf(
      agent({
        model: { ...model, allowedModels: ["tiny", "small"] },
        limits: { tokensPerDay: 1000, requestsPerMinute: 10 },
      }),
    );
    expect(grant).toEqual({
      agent: "team-a/bob",
      upstream: "https://10.0.0.9/v1",
      models: ["tiny", "small"],
      limits: { tokensPerDay: 1000, requestsPerMinute: 10 },
    });
    // What the runner parses on receive.
    expect(GatewayGrant.parse(grant)).toEqual(grant);
  });

  it("leaves out models and limits the Agent does not set (any model, no budget)", () => {
    expect(gatewayGrantOf(agent({ model }))).toStrictEqual({
      agent: "team-a/bob",
      upstream: "https://10.0.0.9/v1",
    });
  });

  it("grants nothing to an Agent without a model", () => {
    expect(gatewayGrantOf(agent({ limits: { tokensPerDay: 5 } }))).toBeUndefined();
  });
});

describe("every command that hands a session or run credentials carries the Agent's grant", () => {
  const API = "agent-sessions.dev/v1alpha1";
  let t: TestServer | undefined;
  afterEach(async () => {
    await t?.close();
    t = undefined;
  });

  const runOnce =
    (gatewayUsage?: unknown): CommandHandler =>
    (command) =>
      command.kind === "run_once"
        ? {
            ok: true,
            result: {
              exit_code: 0,
              // The agent claims a usage of its own; the gateway's count is what the run reports.
              output: `${JSON.stringify({
                id: "r",
                outcome: "succeeded",
                output: "done",
                usage: { input_tokens: 1, output_tokens: 1 },
                started_at: new Date(0).toISOString(),
                finished_at: new Date(0).toISOString(),
              })}\n`,
              timed_out: false,
              ...(gatewayUsage === undefined ? {} : { gateway_usage: gatewayUsage }),
            },
          }
        : defaultHandler(command);

  async function server(handler: CommandHandler): Promise<{ t: TestServer; runner: FakeRunner }> {
    t = await startTestServer({}, { agent: false });
    const runner = await t.runner({ handler });
    expect(
      (
        await t.put("/v1/namespaces/default/agentruntimes/legacy", {
          apiVersion: API,
          kind: "AgentRuntime",
          metadata: { name: "legacy" },
          spec: { image: TEST_IMAGE, contract: "v1alpha1" },
        })
      ).status,
    ).toBe(201);
    for (const [name, runtimeRef, withModel] of [
      ["bob", "reference", true],
      ["runner-bob", "legacy", true],
      ["plain", "reference", false],
    ] as const) {
      const put = await t.put(`/v1/namespaces/default/agents/${name}`, {
        apiVersion: API,
        kind: "Agent",
        metadata: { name },
        spec: {
          runtimeRef,
          credentials: [{ name: "MODEL_API_KEY", value: "sk-planted-0123" }],
          ...(withModel ? { model: { ...model, allowedModels: ["tiny"] } } : {}),
          limits: { tokensPerDay: 5000 },
        },
      });
      expect(put.status, JSON.stringify(put.body)).toBe(201);
    }
    return { t, runner };
  }

  const grantOf = (name: string) => ({
    agent: `default/${name}`,
    upstream: "https://10.0.0.9/v1",
    models: ["tiny"],
    limits: { tokensPerDay: 5000 },
  });

  it("provision: the grant beside the credentials; none for an Agent without a model", async () => {
    const { t, runner } = await server(defaultHandler);
    expect((await t.rpc("ProvisionAgentWorkspace", { agent_ref: "bob" })).status).toBe(200);
    expect((await t.rpc("ProvisionAgentWorkspace", { agent_ref: "plain" })).status).toBe(200);
    const [bob, plain] = runner.commandsOf("provision");
    expect(bob?.credentials).toEqual({ MODEL_API_KEY: "sk-planted-0123" });
    expect(bob?.gateway).toEqual(grantOf("bob"));
    expect(plain).toBeDefined();
    expect(plain?.gateway).toBeUndefined();
  });

  it("run_once: the grant, and the run's usage is the gateway's count, not the agent's claim", async () => {
    const { t, runner } = await server(runOnce({ input_tokens: 120, output_tokens: 34 }));
    const run = await t.call("POST", "/v1/namespaces/default/agentruns", {
      apiVersion: API,
      kind: "AgentRun",
      spec: { agentRef: "runner-bob", input: "hi" },
    });
    expect(run.status, JSON.stringify(run.body)).toBe(201);
    expect(runner.commandsOf("run_once")[0]?.gateway).toEqual(grantOf("runner-bob"));
    expect(run.body.status).toMatchObject({
      phase: "Succeeded",
      usage: { input_tokens: 120, output_tokens: 34 },
      usageSource: "gateway",
      result: { usage: { input_tokens: 1, output_tokens: 1 } },
    });
  });

  it("run_once: a gateway that saw no usage says unavailable, never the agent's claim", async () => {
    const { t } = await server(runOnce("unavailable"));
    const run = await t.call("POST", "/v1/namespaces/default/agentruns", {
      apiVersion: API,
      kind: "AgentRun",
      spec: { agentRef: "runner-bob", input: "hi" },
    });
    expect(run.body.status).toMatchObject({ usage: "unavailable", usageSource: "gateway" });
  });

  it("run_once: an older runner (no gateway_usage) keeps the usage the result record claimed", async () => {
    const { t } = await server(runOnce());
    const run = await t.call("POST", "/v1/namespaces/default/agentruns", {
      apiVersion: API,
      kind: "AgentRun",
      spec: { agentRef: "runner-bob", input: "hi" },
    });
    expect(run.body.status.usage).toEqual({ input_tokens: 1, output_tokens: 1 });
    expect(run.body.status).not.toHaveProperty("usageSource");
  });
});
