/**
 * The model gateway through the whole runner (issue 35): a real server, the real Runner over the
 * real WebSocket with its gateway on the test bed's bridge, the in-memory engine
 * (runner/engine/fake-driver.ts) and the model server on that bridge: an Agent's model endpoint must
 * be one the operator allows, which loopback never is (the gateway would carry the key there). What the engine is asked to make holds gateway tokens only; a
 * token reaches the model with the real key put in; it dies with the workspace.
 */
import { afterEach, beforeEach, expect, it } from "vitest";
import { RUNNER_TOKEN, startTestServer, type TestServer } from "../../proxy/testing/test-server.ts";
import { parseRunnerConfig } from "../../runner/config.ts";
import { FakeDriver, fakeMachine } from "../../runner/engine/fake-driver.ts";
import { Runner } from "../../runner/runner.ts";
import { type ModelServer, startModelServer } from "../fixtures/model-server.ts";
import { DOCKER_BRIDGE_IP } from "../support/testbed.ts";

const SECRET = "sk-unit-planted-0123456789abcdef";
const NS = "/v1/namespaces/default";

let t: TestServer;
let model: ModelServer;
let runner: Runner;
let driver: FakeDriver;
let logs: string[];

beforeEach(async () => {
  model = await startModelServer(DOCKER_BRIDGE_IP, 0);
  t = await startTestServer({}, { agent: false });
  logs = [];
  const config = parseRunnerConfig({
    AGENT_SESSIONS_SERVER_URL: t.server.url,
    AGENT_SESSIONS_RUNNER_TOKEN: RUNNER_TOKEN,
    AGENT_SESSIONS_RUNNER_DATA_DIR: `${t.dataDir}/runner`,
    AGENT_SESSIONS_RUNNER_NAME: "gateway-test",
    AGENT_SESSIONS_GATEWAY_ADDRESS: `${DOCKER_BRIDGE_IP}:0`,
  });
  driver = new FakeDriver({ machine: fakeMachine() });
  runner = new Runner(config, driver, (level, message, fields) =>
    logs.push(JSON.stringify({ level, message, ...fields })),
  );
  await runner.start();
  const agent = await t.put(`${NS}/agents/gw`, {
    apiVersion: "agent-sessions.dev/v1alpha1",
    kind: "Agent",
    metadata: { name: "gw" },
    spec: {
      runtimeRef: "reference",
      credentials: [{ name: "MODEL_API_KEY", value: SECRET }],
      model: { baseUrl: model.url, name: "tiny" },
      // No route to the model: the gateway is the way.
      egress: [],
    },
  });
  expect(agent.status, JSON.stringify(agent.body)).toBe(201);
});

afterEach(async () => {
  runner.stop();
  await t.close();
  await model.close();
});

async function until<T>(what: string, read: () => T | Promise<T>): Promise<NonNullable<T>> {
  const end = Date.now() + 10_000;
  for (;;) {
    const value = await read();
    if (value) return value as NonNullable<T>;
    if (Date.now() > end) throw new Error(`timed out: ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

const chat = (baseUrl: string, token: string) =>
  fetch(`${baseUrl}/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
    body: JSON.stringify({ model: "tiny", messages: [{ role: "user", content: "remember gw-1" }] }),
  });

it("a session's workload gets a gateway token and URL, never the key; the token reaches the model with the key put in, and dies with the workspace", async () => {
  const put = await t.put(`${NS}/harnesssessions/s1`, {
    apiVersion: "agent-sessions.dev/v1alpha1",
    kind: "HarnessSession",
    metadata: { name: "s1" },
    spec: { agentRef: "gw" },
  });
  expect(put.status, JSON.stringify(put.body)).toBe(201);
  const provision = await until("a provision", () => driver.provisions[0]);
  // What the engine is asked to make: a token of the session's own, the gateway's URL and a rule to it.
  const token = provision.secrets.credentials.MODEL_API_KEY ?? "";
  expect(token).toMatch(/^asgw_[A-Za-z0-9_-]{43}$/);
  const baseUrl = provision.spec.env.MODEL_BASE_URL ?? "";
  const gateway = new URL(baseUrl);
  expect(gateway.hostname).toBe(DOCKER_BRIDGE_IP);
  expect(gateway.pathname).toBe(new URL(model.url).pathname);
  expect(provision.spec.egress).toEqual([{ cidr: `${DOCKER_BRIDGE_IP}/32`, port: Number(gateway.port) }]);
  expect(JSON.stringify(driver.provisions)).not.toContain(SECRET);

  // An agent's call with the token reaches the model with the real key.
  const answer = await chat(baseUrl, token);
  expect(answer.status).toBe(200);
  expect(model.authHeaders.at(-1)).toBe(`Bearer ${SECRET}`);

  // Gone with the workspace: the token is worth nothing after the delete.
  expect((await t.call("DELETE", `${NS}/harnesssessions/s1`)).status).toBe(200);
  await until("the workspace removed", () => (driver.removed.length > 0 ? true : undefined));
  await until("the token refused", async () =>
    (await chat(baseUrl, token)).status === 401 ? true : undefined,
  );
  expect(logs.join("\n")).not.toContain(SECRET);
  expect(logs.join("\n")).not.toContain(token);
});
