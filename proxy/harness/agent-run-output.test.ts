import { afterEach, describe, expect, it } from "vitest";
import type { CommandHandler } from "../testing/fake-runner.ts";
import { defaultHandler } from "../testing/fake-runner.ts";
import { startTestServer, TEST_IMAGE, type TestServer } from "../testing/test-server.ts";

const API = "agent-sessions.dev/v1alpha1";
let t: TestServer | undefined;
afterEach(async () => {
  await t?.close();
  t = undefined;
});

describe("an AgentRun whose log was longer than the runner keeps", () => {
  it("says it was truncated and by how much, and still reads the result record from the kept tail", async () => {
    t = await startTestServer();
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
    const record = {
      id: "r",
      outcome: "succeeded",
      output: "the answer",
      usage: "unavailable",
      started_at: new Date(0).toISOString(),
      finished_at: new Date(0).toISOString(),
    };
    const handler: CommandHandler = (command) =>
      command.kind === "run_once"
        ? {
            ok: true,
            result: {
              exit_code: 0,
              output: `chatter\n${JSON.stringify(record)}\n`,
              output_truncated_bytes: 5_000_000,
              timed_out: false,
            },
          }
        : defaultHandler(command);
    await t.runner({ handler });
    const reply = await fetch(`${t.server.url}/v1/namespaces/default/agentruns`, {
      method: "POST",
      headers: { authorization: `Bearer ${t.server.config.adminToken}`, "content-type": "application/json" },
      body: JSON.stringify({ apiVersion: API, kind: "AgentRun", spec: { agentRef: "bob", input: "hi" } }),
    });
    expect(reply.status).toBe(201);
    const run = (await reply.json()) as { status: Record<string, unknown> };
    expect(run.status).toMatchObject({
      phase: "Succeeded",
      output: "the answer",
      outputTruncatedBytes: 5_000_000,
      message: expect.stringMatching(/output truncated: the first 5000000 bytes of stdout were dropped/),
    });
  });
});
