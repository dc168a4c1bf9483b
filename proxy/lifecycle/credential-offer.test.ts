import { afterEach, beforeEach, describe, expect, it } from "vitest";
import type { FakeRunner, FakeRunnerOptions } from "../testing/fake-runner.ts";
import { startTestServer, TEST_IMAGE, type TestServer } from "../testing/test-server.ts";

// biome-ignore lint/suspicious/noExplicitAny: JSON bodies of many shapes, read by assertions
type Json = any;

const API = "agent-sessions.dev/v1alpha1";
const NS = "/v1/namespaces/default";
const OFFERED = "sk-offered-0123456789";
const SERVER_SECRET = "server-secret-never-offered-0123";
const ADMIN_IN_ENV = "admin-token-in-env-0123456789";

let t: TestServer;
let runner: FakeRunner;
const saved: Record<string, string | undefined> = {};

const call = (method: string, path: string, body?: unknown) => t.call(method, path, body);

const agent = (name: string, runtimeRef: string, variable: string) =>
  call("PUT", `${NS}/agents/${name}`, {
    apiVersion: API,
    kind: "Agent",
    metadata: { name },
    spec: { runtimeRef, credentials: [{ name: "MODEL_API_KEY", secretRef: { env: variable } }] },
  });

const runnerOptions: FakeRunnerOptions = {
  handler: (command) =>
    command.kind === "run_once"
      ? {
          ok: true,
          result: { exit_code: 0, output: "ran", timed_out: false, resolved_image_digest: undefined },
        }
      : { ok: false, error: { code: "UNIMPLEMENTED", message: `not in this test: ${command.kind}` } },
};

/**
 * The same server (data directory) started again offering `credentialEnv` instead: how a variable
 * an Agent was written against stops being offered.
 */
async function restartOffering(credentialEnv: string[]): Promise<void> {
  await t.stop();
  t = await startTestServer({ dataDir: t.dataDir, credentialEnv }, { agent: false });
  runner = await t.runner(runnerOptions);
}

beforeEach(async () => {
  const env = {
    UT_OFFERED_KEY: OFFERED,
    UT_SERVER_SECRET: SERVER_SECRET,
    AGENT_SESSIONS_TOKEN: ADMIN_IN_ENV,
  };
  for (const [k, v] of Object.entries(env)) {
    saved[k] = process.env[k];
    process.env[k] = v;
  }
  // Listing an AGENT_SESSIONS_* name is refused by parseConfig; given directly, it is still never offered.
  t = await startTestServer({ credentialEnv: ["UT_OFFERED_KEY", "AGENT_SESSIONS_TOKEN"] });
  runner = await t.runner(runnerOptions);
  expect(
    (
      await call("PUT", `${NS}/agentruntimes/legacy`, {
        apiVersion: API,
        kind: "AgentRuntime",
        metadata: { name: "legacy" },
        spec: { image: TEST_IMAGE, contract: "v1alpha1", approved: true },
      })
    ).status,
  ).toBe(201);
});

afterEach(async () => {
  await t.close();
  for (const [k, v] of Object.entries(saved))
    if (v === undefined) delete process.env[k];
    else process.env[k] = v;
});

describe("the server offers sessions only the credential variables an operator lists", () => {
  it("a one-shot run receives a listed variable", async () => {
    expect((await agent("ok", "legacy", "UT_OFFERED_KEY")).status).toBe(201);
    const run = await call("POST", `${NS}/agentruns`, {
      apiVersion: API,
      kind: "AgentRun",
      spec: { agentRef: "ok", input: "hi" },
    });
    expect(run.status).toBe(201);
    expect(runner.commandsOf("run_once")[0]?.credentials).toEqual({ MODEL_API_KEY: OFFERED });
  });

  it("an Agent naming an unlisted variable, or the server's own settings, is refused when written", async () => {
    for (const [name, variable] of [
      ["nosy", "UT_SERVER_SECRET"],
      ["admin", "AGENT_SESSIONS_TOKEN"],
    ] as const) {
      const put = await agent(name, "legacy", variable);
      expect(put.status).toBe(400);
      expect(put.body).toMatchObject({
        code: "INVALID_ARGUMENT",
        details: { field_violations: [{ field: "spec.credentials.0.secretRef.env" }] },
      });
      expect(put.body.message).toContain(
        `credential MODEL_API_KEY refers to environment variable ${variable}, which the server does not offer to sessions`,
      );
      expect(JSON.stringify(put.body)).not.toContain(SERVER_SECRET);
      expect(JSON.stringify(put.body)).not.toContain(ADMIN_IN_ENV);
      expect((await call("GET", `${NS}/agents/${name}`)).status).toBe(404);
    }
  });

  it("a one-shot run whose variable is no longer offered (the server restarted without it) is refused before anything runs", async () => {
    expect((await agent("nosy", "legacy", "UT_OFFERED_KEY")).status).toBe(201);
    await restartOffering([]);
    const run = await call("POST", `${NS}/agentruns`, {
      apiVersion: API,
      kind: "AgentRun",
      spec: { agentRef: "nosy", input: "hi" },
    });
    expect(run.status).toBe(412);
    expect(run.body).toMatchObject({
      code: "FAILED_PRECONDITION",
      details: { reason: "CredentialNotOffered", credential: "MODEL_API_KEY", variable: "UT_OFFERED_KEY" },
    });
    expect(run.body.message).toContain(
      "credential MODEL_API_KEY of Agent default/nosy refers to environment variable UT_OFFERED_KEY, which the server does not offer to sessions",
    );
    expect(JSON.stringify(run.body)).not.toContain(OFFERED);
    expect(runner.commandsOf("run_once")).toEqual([]);
  });

  it("a HarnessSession whose Agent's variable is no longer offered fails with reason Invalid and provisions nothing", async () => {
    expect((await agent("nosy", "reference", "UT_OFFERED_KEY")).status).toBe(201);
    await restartOffering(["UT_SERVER_SECRET"]);
    const put = await call("PUT", `${NS}/harnesssessions/leak`, {
      apiVersion: API,
      kind: "HarnessSession",
      metadata: { name: "leak" },
      spec: { agentRef: "nosy", runtimeRef: "reference" },
    });
    expect(put.status).toBe(201);
    let got: Json;
    for (let i = 0; i < 100; i += 1) {
      got = (await call("GET", `${NS}/harnesssessions/leak`)).body;
      if (got.status.phase === "Failed") break;
      await new Promise((r) => setTimeout(r, 20));
    }
    expect(got.status.phase).toBe("Failed");
    expect(got.status.conditions[0]).toMatchObject({ type: "Ready", status: "False", reason: "Invalid" });
    expect(got.status.conditions[0].message).toMatch(
      /^credential MODEL_API_KEY of Agent default\/nosy refers to environment variable UT_OFFERED_KEY, which the server does not offer/,
    );
    expect(JSON.stringify(got)).not.toContain(OFFERED);
    expect(runner.commandsOf("provision")).toEqual([]);
  });
});
