import type { Hono } from "hono";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { API_VERSION } from "../../contracts/resources.ts";
import { SqliteStore } from "../store/sqlite-store.ts";
import { testApp } from "../testing/test-app.ts";
import { ADMIN_TOKEN } from "../testing/test-server.ts";

// biome-ignore lint/suspicious/noExplicitAny: JSON bodies of many shapes, read by assertions
type Json = any;

/** What the server offers Agents' secretRefs (offeredCredentialEnv's shape): set, listed-but-unset, team-a only. */
const OFFERED = {
  SHARED_KEY: "sk-shared-0123456789",
  LISTED_UNSET: undefined,
  "team-a/TEAM_KEY": "sk-team-a-0123456789",
};

let store: SqliteStore;
let app: Hono;

beforeEach(() => {
  store = new SqliteStore(":memory:");
  app = testApp(store, undefined, { secretEnv: OFFERED });
});
afterEach(async () => {
  await store.close();
});

async function call(method: string, path: string, body?: unknown): Promise<{ status: number; body: Json }> {
  const reply = await app.request(path, {
    method,
    headers: { authorization: `Bearer ${ADMIN_TOKEN}`, "content-type": "application/json" },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  return { status: reply.status, body: await reply.json() };
}

const model = { baseUrl: "http://10.213.0.1:11434/v1", name: "tiny" };
const agent = (spec: Record<string, unknown>, namespace = "default") => ({
  apiVersion: API_VERSION,
  kind: "Agent",
  metadata: { name: "bob", namespace },
  spec: {
    runtimeRef: "reference",
    credentials: [{ name: "MODEL_API_KEY", secretRef: { env: "SHARED_KEY" } }],
    model,
    ...spec,
  },
});
const put = (body: Json, namespace = "default") =>
  call("PUT", `/v1/namespaces/${namespace}/agents/bob`, body);

/**
 * A refused write is 400 INVALID_ARGUMENT naming `field`, with a description a person can act on,
 * and leaves the Agent as it was (the one `before` wrote, or none).
 */
async function expectRefused(
  body: Json,
  field: string,
  description: string | RegExp,
  options: { namespace?: string; before?: Json } = {},
): Promise<void> {
  const namespace = options.namespace ?? "default";
  const kept = (await call("GET", `/v1/namespaces/${namespace}/agents/bob`)).body;
  const refused = await put(body, namespace);
  expect(refused.status, JSON.stringify(refused.body)).toBe(400);
  expect(refused.body.code).toBe("INVALID_ARGUMENT");
  const violation = refused.body.details.field_violations.find((v: Json) => v.field === field);
  expect(violation, JSON.stringify(refused.body)).toBeDefined();
  expect(violation.description).toMatch(description);
  expect(refused.body.message).toContain(field);
  const after = await call("GET", `/v1/namespaces/${namespace}/agents/bob`);
  if (options.before === undefined) expect(after.status).toBe(404);
  else expect(after.body).toEqual(kept);
}

describe("PUT agents refuses a credential the server cannot read (400, nothing stored)", () => {
  it("accepts a secretRef to a variable the server offers and sets, to every namespace or to the Agent's", async () => {
    expect((await put(agent({}))).status).toBe(201);
    const team = agent(
      { credentials: [{ name: "MODEL_API_KEY", secretRef: { env: "TEAM_KEY" } }] },
      "team-a",
    );
    expect((await put(team, "team-a")).status).toBe(201);
  });

  it("refuses a variable the server does not offer, naming the field and AGENT_SESSIONS_CREDENTIAL_ENV", async () => {
    const before = agent({});
    expect((await put(before)).status).toBe(201);
    for (const variable of ["HOME", "AGENT_SESSIONS_TOKEN"])
      await expectRefused(
        agent({
          credentials: [
            { name: "FIRST", value: "literal" },
            { name: "MODEL_API_KEY", secretRef: { env: variable } },
          ],
        }),
        "spec.credentials.1.secretRef.env",
        `credential MODEL_API_KEY refers to environment variable ${variable}, which the server does not offer to sessions of namespace default (an operator lists the variables it offers in AGENT_SESSIONS_CREDENTIAL_ENV`,
        { before },
      );
  });

  it("refuses a variable offered to another namespace only", async () => {
    await expectRefused(
      agent({ credentials: [{ name: "MODEL_API_KEY", secretRef: { env: "TEAM_KEY" } }] }),
      "spec.credentials.0.secretRef.env",
      /which the server does not offer to sessions of namespace default/,
    );
  });

  it("refuses a variable offered but not set in the server's environment", async () => {
    await expectRefused(
      agent({ credentials: [{ name: "MODEL_API_KEY", secretRef: { env: "LISTED_UNSET" } }] }),
      "spec.credentials.0.secretRef.env",
      "credential MODEL_API_KEY refers to environment variable LISTED_UNSET, which the server's environment does not set",
    );
  });

  it("offers nothing when the app is given no offered environment", async () => {
    app = testApp(store);
    await expectRefused(agent({}), "spec.credentials.0.secretRef.env", /does not offer/);
  });
});

describe("PUT agents refuses a model the gateway could not serve (400, nothing stored)", () => {
  it.each(["file:///etc/passwd", "ftp://x", "javascript:alert(1)"])("refuses baseUrl %s", async (baseUrl) => {
    const before = agent({});
    expect((await put(before)).status).toBe(201);
    await expectRefused(
      agent({ model: { ...model, baseUrl } }),
      "spec.model.baseUrl",
      "must be an http:// or https:// URL",
      { before },
    );
  });

  it("refuses allowedModels that leave out model.name, and accepts them with it", async () => {
    await expectRefused(
      agent({ model: { ...model, allowedModels: ["other"] } }),
      "spec.model.allowedModels",
      /must contain model.name/,
    );
    const allowed = await put(agent({ model: { ...model, allowedModels: ["tiny", "other"] } }));
    expect(allowed.status).toBe(201);
    expect(allowed.body.spec.model.allowedModels).toEqual(["tiny", "other"]);
  });
});

describe("PUT agents refuses limits that are not a budget (400, nothing stored)", () => {
  it.each([
    [{ tokensPerDay: -5 }, "spec.limits.tokensPerDay", "must be at least 1"],
    [{ tokensPerDay: 0 }, "spec.limits.tokensPerDay", "must be at least 1"],
    [{ requestsPerMinute: 2.5 }, "spec.limits.requestsPerMinute", "must be a whole number"],
    [{ requestsPerMinute: 10_000_000 }, "spec.limits.requestsPerMinute", "must be at most 1000000"],
    [{ tokensPerDay: 1e15 }, "spec.limits.tokensPerDay", "must be at most 1000000000000"],
    [{ tokensPerDay: "lots" }, "spec.limits.tokensPerDay", /number/],
    [{ tokensPerMonth: 10 }, "spec.limits.tokensPerMonth", /not a field/],
  ])("refuses %j", async (limits, field, description) => {
    const before = agent({ limits: { tokensPerDay: 1000 } });
    expect((await put(before)).status).toBe(201);
    await expectRefused(agent({ limits }), field, description, { before });
  });

  it("stores budgets within bounds and answers them back", async () => {
    const limits = { tokensPerDay: 2_000_000, requestsPerMinute: 60 };
    const written = await put(agent({ limits }));
    expect(written.status).toBe(201);
    expect((await call("GET", "/v1/namespaces/default/agents/bob")).body.spec.limits).toEqual(limits);
  });
});
