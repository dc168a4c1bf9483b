import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { AgentSessionsClient } from "../../client/index.ts";
import { ADMIN_TOKEN, startTestServer, type TestServer } from "../testing/test-server.ts";

// biome-ignore lint/suspicious/noExplicitAny: JSON bodies of many shapes, read by assertions
type Json = any;

const NS = "/v1/namespaces/default";
const API = "agent-sessions.dev/v1alpha1";

let t: TestServer;
let client: AgentSessionsClient;
beforeEach(async () => {
  t = await startTestServer();
  client = new AgentSessionsClient({ baseUrl: t.server.url, token: ADMIN_TOKEN });
});
afterEach(async () => {
  await t.close();
});

async function get(path: string): Promise<{ status: number; body: Json }> {
  const response = await fetch(`${t.server.url}${path}`, {
    headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
  });
  return { status: response.status, body: await response.json() };
}

async function putAgent(name: string): Promise<void> {
  const put = await t.put(`${NS}/agents/${name}`, {
    apiVersion: API,
    kind: "Agent",
    metadata: { name },
    spec: { runtimeRef: "reference", model: { baseUrl: "http://10.213.0.1:11434/v1", name: "tiny" } },
  });
  expect(put.status).toBe(201);
}

/** Every page of a list route, following `metadata.continue`. */
async function pages(path: string, limit: number): Promise<string[][]> {
  const out: string[][] = [];
  let next: string | undefined;
  do {
    const page = await get(`${path}?limit=${limit}${next ? `&continue=${next}` : ""}`);
    expect(page.status).toBe(200);
    out.push(page.body.items.map((i: Json) => i.metadata.name));
    next = page.body.metadata.continue;
  } while (next !== undefined);
  return out;
}

describe("list pages", () => {
  it("splits a namespace's Agents into pages by name, the last without a continue token", async () => {
    for (const name of ["e", "b", "g", "a", "f", "c"]) await putAgent(name);
    // `alice` comes from the test server.
    expect(await pages(`${NS}/agents`, 3)).toEqual([["a", "alice", "b"], ["c", "e", "f"], ["g"]]);
    const all = await get(`${NS}/agents`);
    expect(all.body.items).toHaveLength(7);
    expect(all.body.metadata).toEqual({});
  });

  it("keeps its place when objects are added or removed between pages (keyset, no repeats)", async () => {
    for (const name of ["b", "d", "f", "h"]) await putAgent(name);
    const first = await get(`${NS}/agents?limit=2`);
    expect(first.body.items.map((i: Json) => i.metadata.name)).toEqual(["alice", "b"]);
    await putAgent("a"); // before the cursor: not seen by this walk
    await putAgent("e"); // after it: seen
    expect(
      (
        await fetch(`${t.server.url}${NS}/agents/d`, {
          method: "DELETE",
          headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
        })
      ).status,
    ).toBe(200);
    const rest = await get(`${NS}/agents?limit=10&continue=${first.body.metadata.continue}`);
    expect(rest.body.items.map((i: Json) => i.metadata.name)).toEqual(["e", "f", "h"]);
    expect(rest.body.metadata.continue).toBeUndefined();
  });

  it("pages HarnessSessions and runners the same way", async () => {
    for (const name of ["s3", "s1", "s2"]) {
      const put = await t.put(`${NS}/harnesssessions/${name}`, {
        apiVersion: API,
        kind: "HarnessSession",
        metadata: { name },
        spec: { agentRef: "alice", runtimeRef: "reference" },
      });
      expect(put.status).toBe(201);
    }
    expect(await pages(`${NS}/harnesssessions`, 2)).toEqual([["s1", "s2"], ["s3"]]);
    for (const name of ["r-b", "r-a", "r-c"]) await t.runner({ name });
    const runners = await get("/v1/runners?limit=2");
    expect(runners.body.items.map((r: Json) => r.runner_name)).toEqual(["r-a", "r-b"]);
    const rest = await get(`/v1/runners?limit=2&continue=${runners.body.metadata.continue}`);
    expect(rest.body.items.map((r: Json) => r.runner_name)).toEqual(["r-c"]);
    expect((await client.allRunners()).map((r) => r.runner_name)).toEqual(["r-a", "r-b", "r-c"]);
  });

  it("the typed client walks every page", async () => {
    for (let i = 0; i < 5; i++) await putAgent(`agent-${i}`);
    const names = (await client.listAll("agents", "default", 2)).map((a) => a.metadata.name);
    expect(names).toEqual(["agent-0", "agent-1", "agent-2", "agent-3", "agent-4", "alice"]);
  });

  it("refuses a bad limit or a token of another list with INVALID_ARGUMENT, naming the parameter", async () => {
    for (const limit of ["0", "1001", "x", "-1"]) {
      const bad = await get(`${NS}/agents?limit=${limit}`);
      expect(bad.status).toBe(400);
      expect(bad.body.code).toBe("INVALID_ARGUMENT");
      expect(bad.body.message).toMatch(/limit/);
    }
    await putAgent("zed");
    const agentsToken = (await get(`${NS}/agents?limit=1`)).body.metadata.continue;
    const foreign = await get(`${NS}/agentruntimes?continue=${agentsToken}`);
    expect(foreign.status).toBe(400);
    expect(foreign.body.message).toMatch(/continue \(query\): not a token of this list/);
    const otherNamespace = await get(`/v1/namespaces/other/agents?continue=${agentsToken}`);
    expect(otherNamespace.status).toBe(400);
    for (const garbage of ["bm90LWpzb24", "eyJsIjoiYWdlbnRzL2RlZmF1bHQiLCJrIjpbMV19", "has%20space"]) {
      const bad = await get(`${NS}/agents?continue=${garbage}`);
      expect(bad.status).toBe(400);
      expect(bad.body.code).toBe("INVALID_ARGUMENT");
    }
  });
});

describe("GetAgentStatus pages", () => {
  async function startSessions(n: number): Promise<string[]> {
    await t.runner();
    const ids: string[] = [];
    for (let i = 0; i < n; i++) {
      const provisioned = await t.rpc("ProvisionAgentWorkspace", {
        agent_ref: "alice",
        workstream: `w${i}`,
        client_request_id: `req-${i}`,
      });
      const started = await t.rpc("StartAgentSession", { container_name: provisioned.body.container_name });
      expect(started.status).toBe(200);
      ids.push(started.body.session_id as string);
    }
    return ids;
  }

  it("answers every session once, in creation order, page by page", async () => {
    const ids = await startSessions(5);
    const seen: string[] = [];
    let token: string | undefined;
    let calls = 0;
    do {
      const page = await t.rpc("GetAgentStatus", { page_size: 2, ...(token ? { page_token: token } : {}) });
      expect(page.status).toBe(200);
      const sessions = page.body.sessions as { session_id: string }[];
      expect(sessions.length).toBeLessThanOrEqual(2);
      seen.push(...sessions.map((s) => s.session_id));
      token = page.body.next_page_token as string | undefined;
      calls++;
    } while (token !== undefined);
    expect(calls).toBe(3);
    expect(seen).toEqual(ids);
    expect((await client.allSessionStatuses(2)).map((s) => s.session_id)).toEqual(ids);
    const whole = await t.rpc("GetAgentStatus", {});
    expect((whole.body.sessions as unknown[]).length).toBe(5);
    expect(whole.body.next_page_token).toBeUndefined();
  });

  it("refuses a page size out of range or a token of another list", async () => {
    await startSessions(1);
    for (const page_size of [0, 1001, 1.5]) {
      const bad = await t.rpc("GetAgentStatus", { page_size });
      expect(bad.status).toBe(400);
      expect(bad.body.message).toMatch(/page_size/);
    }
    const runnersToken = Buffer.from(JSON.stringify({ l: "runners", k: ["x"] })).toString("base64url");
    const foreign = await t.rpc("GetAgentStatus", { page_token: runnersToken });
    expect(foreign.status).toBe(400);
    expect(foreign.body.message).toMatch(/page_token: not a token of this list/);
  });
});
