import { afterEach, describe, expect, it } from "vitest";
import { startTestServer, type TestServer } from "../testing/test-server.ts";

/** The egress guard as a client meets it: on Agent writes, sessions and one-shot runs. */
const API = "agent-sessions.dev/v1alpha1";
const agent = (name: string, egress: unknown[], runtimeRef = "reference") => ({
  apiVersion: API,
  kind: "Agent",
  metadata: { name },
  spec: { runtimeRef, egress },
});

let t: TestServer | undefined;
afterEach(async () => {
  await t?.close();
  t = undefined;
});

describe("the server's egress guard", () => {
  it.each([
    ["0.0.0.0/0", 443, /0.0.0.0\/0 is wider than \/16/],
    ["169.254.169.254", 80, /link-local 169.254.0.0\/16/],
    ["127.0.0.1", 11434, /loopback/],
    ["999.1.1.1/99", 443, /999.1.1.1\/99 is not an IPv4 address/],
    ["10.96.0.10", 53, /10.96.0.0\/12, which the operator denies/],
  ])("refuses an Agent reaching %s:%i with INVALID_ARGUMENT naming the rule", async (cidr, port, why) => {
    t = await startTestServer({ egressDeny: [{ cidr: "10.96.0.0/12" }] });
    const put = await t.put("/v1/namespaces/default/agents/bad", agent("bad", [{ cidr, port }]));
    expect(put.status).toBe(400);
    expect(put.body).toMatchObject({ code: "INVALID_ARGUMENT" });
    expect(String(put.body.message)).toMatch(/spec\.egress\.0/);
    expect(String(put.body.message)).toMatch(why);
    const read = await fetch(`${t.server.url}/v1/namespaces/default/agents/bad`, {
      headers: { authorization: `Bearer ${t.server.config.adminToken}` },
    });
    expect(read.status).toBe(404);
  });

  it("admits only what the operator allows (AGENT_SESSIONS_EGRESS_ALLOW): an endpoint outside it is FAILED_PRECONDITION at PUT naming the setting", async () => {
    t = await startTestServer({
      egressAllow: [{ cidr: "10.213.0.1/32", ports: { first: 11434, last: 11434 } }],
    });
    // What the issue saw accepted: the engine's API on a bridge, the image registry.
    for (const [cidr, port] of [
      ["172.20.0.1", 2375],
      ["10.213.0.1", 5000],
      ["10.213.0.0/24", 11434],
    ] as const) {
      const put = await t.put("/v1/namespaces/default/agents/out", agent("out", [{ cidr, port }]));
      expect([cidr, port, put.status, put.body.code]).toEqual([cidr, port, 412, "FAILED_PRECONDITION"]);
      expect(String(put.body.message)).toContain("spec.egress.0");
      expect(String(put.body.message)).toContain("AGENT_SESSIONS_EGRESS_ALLOW");
    }
    const inside = await t.put(
      "/v1/namespaces/default/agents/in",
      agent("in", [{ cidr: "10.213.0.1/32", port: 11434 }]),
    );
    expect(inside.status).toBe(201);
  });

  it("allows nothing when the operator names nothing", async () => {
    t = await startTestServer({ egressAllow: [] }, { agent: false });
    const put = await t.put(
      "/v1/namespaces/default/agents/any",
      agent("any", [{ cidr: "10.213.0.1", port: 11434 }]),
    );
    expect(put.status).toBe(412);
    expect(String(put.body.message)).toContain("AGENT_SESSIONS_EGRESS_ALLOW is empty");
  });

  it("refuses the port the server actually listens on (it asked for port 0)", async () => {
    t = await startTestServer();
    const port = Number(new URL(t.server.url).port);
    const put = await t.put(
      "/v1/namespaces/default/agents/own",
      agent("own", [{ cidr: "10.213.0.1", port }]),
    );
    expect(put.status).toBe(400);
    expect(String(put.body.message)).toMatch(/the server's own port/);
  });

  it("gives the policy pack the server's real port with every provisioned spec", async () => {
    t = await startTestServer();
    const runner = await t.runner();
    const spawned = await t.rpc("SpawnAgent", { agent_ref: "alice", client_request_id: "r1" });
    expect(spawned.status).toBe(200);
    const port = Number(new URL(t.server.url).port);
    const [provision] = runner.commandsOf("provision");
    expect(provision?.spec.forbiddenEgressPorts).toContain(port);
    expect(provision?.spec.forbiddenEgressPorts).toContain(4222);
  });

  it("refuses a one-shot run of an Agent stored before the operator denied its egress, sending nothing", async () => {
    t = await startTestServer();
    const dataDir = t.dataDir;
    await t.put("/v1/namespaces/default/agentruntimes/legacy", {
      apiVersion: API,
      kind: "AgentRuntime",
      metadata: { name: "legacy" },
      spec: { image: t.server.config.shippedImages.reference, contract: "v1alpha1", approved: true },
    });
    expect(
      (
        await t.put(
          "/v1/namespaces/default/agents/bob",
          agent("bob", [{ cidr: "10.0.0.5", port: 2375 }], "legacy"),
        )
      ).status,
    ).toBe(201);
    await t.stop();
    t = await startTestServer({ dataDir, egressDeny: [{ cidr: "10.0.0.5", port: 2375 }] }, { agent: false });
    const runner = await t.runner();
    const run = await fetch(`${t.server.url}/v1/namespaces/default/agentruns`, {
      method: "POST",
      headers: { authorization: `Bearer ${t.server.config.adminToken}`, "content-type": "application/json" },
      body: JSON.stringify({ apiVersion: API, kind: "AgentRun", spec: { agentRef: "bob", input: "hi" } }),
    });
    expect(run.status).toBe(412);
    const body = (await run.json()) as { code: string; message: string };
    expect(body).toMatchObject({ code: "FAILED_PRECONDITION" });
    expect(body.message).toMatch(
      /Agent default\/bob may not reach: spec.egress.0: egress rule 10.0.0.5:2375/,
    );
    expect(runner.commandsOf("run_once")).toEqual([]);
  });

  it("refuses to provision an Agent stored before the operator narrowed AGENT_SESSIONS_EGRESS_ALLOW, sending nothing", async () => {
    t = await startTestServer({}, { agent: false });
    const dataDir = t.dataDir;
    expect(
      (await t.put("/v1/namespaces/default/agents/bob", agent("bob", [{ cidr: "10.213.0.1", port: 5000 }])))
        .status,
    ).toBe(201);
    await t.stop();
    t = await startTestServer(
      { dataDir, egressAllow: [{ cidr: "10.213.0.1/32", ports: { first: 11434, last: 11434 } }] },
      { agent: false },
    );
    const runner = await t.runner();
    const spawned = await t.rpc("SpawnAgent", { agent_ref: "bob", client_request_id: "r1" });
    expect(spawned.status).toBe(412);
    expect(spawned.body).toMatchObject({
      code: "FAILED_PRECONDITION",
      details: { reason: "EgressNotAllowed", setting: "AGENT_SESSIONS_EGRESS_ALLOW" },
    });
    expect(String(spawned.body.message)).toContain(
      "AGENT_SESSIONS_EGRESS_ALLOW allows only 10.213.0.1/32:11434",
    );
    expect(runner.commandsOf("provision")).toEqual([]);
  });
});
