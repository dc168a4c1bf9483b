import { afterEach, beforeEach, describe, expect, it } from "vitest";
import type { FakeRunner } from "../testing/fake-runner.ts";
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
  runner = await t.runner({
    handler: (command) =>
      command.kind === "run_once"
        ? {
            ok: true,
            result: { exit_code: 0, output: "ran", timed_out: false, resolved_image_digest: undefined },
          }
        : { ok: false, error: { code: "UNIMPLEMENTED", message: `not in this test: ${command.kind}` } },
  });
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

  it("a one-shot run naming an unlisted variable, or the server's own settings, is refused before anything runs", async () => {
    for (const [name, variable] of [
      ["nosy", "UT_SERVER_SECRET"],
      ["admin", "AGENT_SESSIONS_TOKEN"],
    ] as const) {
      expect((await agent(name, "legacy", variable)).status).toBe(201);
      const run = await call("POST", `${NS}/agentruns`, {
        apiVersion: API,
        kind: "AgentRun",
        spec: { agentRef: name, input: "hi" },
      });
      expect(run.status).toBe(412);
      expect(run.body).toMatchObject({
        code: "FAILED_PRECONDITION",
        details: { reason: "CredentialNotOffered", credential: "MODEL_API_KEY", variable },
      });
      expect(run.body.message).toContain(
        `credential MODEL_API_KEY of Agent default/${name} refers to environment variable ${variable}, which the server does not offer to sessions`,
      );
      expect(JSON.stringify(run.body)).not.toContain(SERVER_SECRET);
      expect(JSON.stringify(run.body)).not.toContain(ADMIN_IN_ENV);
    }
    expect(runner.commandsOf("run_once")).toEqual([]);
  });

  it("a HarnessSession whose Agent names an unlisted variable fails with reason Invalid and provisions nothing", async () => {
    expect((await agent("nosy", "reference", "UT_SERVER_SECRET")).status).toBe(201);
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
      /^credential MODEL_API_KEY of Agent default\/nosy refers to environment variable UT_SERVER_SECRET, which the server does not offer/,
    );
    expect(JSON.stringify(got)).not.toContain(SERVER_SECRET);
    expect(runner.commandsOf("provision")).toEqual([]);
  });
});
