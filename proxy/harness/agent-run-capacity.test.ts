import { afterEach, describe, expect, it } from "vitest";
import { type CommandHandler, defaultHandler } from "../testing/fake-runner.ts";
import { startTestServer, TEST_IMAGE, type TestServer } from "../testing/test-server.ts";
import { until } from "../../test/support/until.ts";

const API = "agent-sessions.dev/v1alpha1";
let t: TestServer | undefined;
afterEach(async () => {
  await t?.close();
  t = undefined;
});

/** A runner whose runs finish when the test says so. */
function gatedRuns() {
  const gates: (() => void)[] = [];
  const handler: CommandHandler = (command) =>
    command.kind === "run_once"
      ? new Promise((resolve) => {
          gates.push(() =>
            resolve({ ok: true, result: { exit_code: 0, output: "done\n", timed_out: false } } as never),
          );
        })
      : defaultHandler(command);
  return { gates, handler };
}

async function setUp(server: TestServer): Promise<void> {
  await server.put("/v1/namespaces/default/agentruntimes/legacy", {
    apiVersion: API,
    kind: "AgentRuntime",
    metadata: { name: "legacy" },
    spec: { image: TEST_IMAGE, contract: "v1alpha1" },
  });
  await server.put("/v1/namespaces/default/agents/bob", {
    apiVersion: API,
    kind: "Agent",
    metadata: { name: "bob" },
    spec: { runtimeRef: "legacy" },
  });
}

const run = (server: TestServer) =>
  fetch(`${server.server.url}/v1/namespaces/default/agentruns`, {
    method: "POST",
    headers: {
      authorization: `Bearer ${server.server.config.adminToken}`,
      "content-type": "application/json",
    },
    body: JSON.stringify({ apiVersion: API, kind: "AgentRun", spec: { agentRef: "bob", input: "hi" } }),
  });

describe("one-shot AgentRuns take runner capacity", () => {
  it("refuse a run when its runner is full with runs, and place again once one ends", async () => {
    t = await startTestServer();
    await setUp(t);
    const { gates, handler } = gatedRuns();
    const runner = await t.runner({ capacity: 1, handler });
    const first = run(t);
    await until("one run held", () => gates.length === 1 || undefined);
    const second = await run(t);
    expect(second.status).toBe(429);
    expect(await second.json()).toMatchObject({
      code: "RESOURCE_EXHAUSTED",
      message: expect.stringMatching(/at capacity/),
    });
    gates[0]?.();
    expect((await first).status).toBe(201);
    const third = run(t);
    await until("two runs held", () => gates.length === 2 || undefined);
    gates[1]?.();
    expect((await third).status).toBe(201);
    expect(runner.commandsOf("run_once")).toHaveLength(2);
  });

  it("refuse more runs at once than AGENT_SESSIONS_AGENT_RUNS_MAX, whatever the runners take", async () => {
    t = await startTestServer({ agentRunsMax: 1 });
    await setUp(t);
    const { gates, handler } = gatedRuns();
    await t.runner({ capacity: 50, handler });
    const first = run(t);
    await until("one run held", () => gates.length === 1 || undefined);
    const second = await run(t);
    expect(second.status).toBe(429);
    expect(((await second.json()) as { message: string }).message).toMatch(/AGENT_SESSIONS_AGENT_RUNS_MAX/);
    gates[0]?.();
    expect((await first).status).toBe(201);
  });
});
