import { afterEach, describe, expect, it } from "vitest";
import { AgentRuntime } from "../../contracts/resources.ts";
import { parseConfig } from "../config.ts";
import { RuntimeApproval } from "./runtime-approval.ts";
import { startTestServer, TEST_IMAGE, type TestServer } from "../testing/test-server.ts";

const API = "agent-sessions.dev/v1alpha1";
const FOREIGN_IMAGE = `r.example/agent@sha256:${"b".repeat(64)}`;
const runtime = (namespace: string, name: string, image = TEST_IMAGE) =>
  AgentRuntime.parse({
    apiVersion: API,
    kind: "AgentRuntime",
    metadata: { namespace, name },
    spec: { image, contract: "v1alpha2", approved: true },
  });

describe("RuntimeApproval", () => {
  it("approves images from the approved registries only, whatever spec.approved says", () => {
    const approval = new RuntimeApproval();
    expect(approval.verdict(runtime("default", "x")).approved).toBe(true);
    expect(approval.verdict(runtime("default", "x", FOREIGN_IMAGE))).toEqual({
      approved: false,
      message:
        "its image comes from registry r.example, which is not approved (AGENT_SESSIONS_APPROVED_REGISTRIES: 127.0.0.1:5000)",
    });
  });

  it("approves only the listed runtimes when AGENT_SESSIONS_APPROVED_RUNTIMES is set", () => {
    const approval = new RuntimeApproval({ runtimes: ["team-a/*", "default/chat"] });
    expect(approval.verdict(runtime("team-a", "any")).approved).toBe(true);
    expect(approval.verdict(runtime("default", "chat")).approved).toBe(true);
    expect(approval.verdict(runtime("default", "other")).message).toMatch(
      /not listed in AGENT_SESSIONS_APPROVED_RUNTIMES \(team-a\/\*, default\/chat\)/,
    );
  });

  it("approves the reference runtime with the configured image only", () => {
    const referenceImage = `registry.internal:443/ref@sha256:${"c".repeat(64)}`;
    const approval = new RuntimeApproval({ runtimes: [], shippedImages: { reference: referenceImage } });
    expect(approval.verdict(runtime("default", "reference", referenceImage)).approved).toBe(true);
    expect(approval.verdict(runtime("default", "reference", FOREIGN_IMAGE)).approved).toBe(false);
    expect(approval.verdict(runtime("team-a", "reference", referenceImage)).approved).toBe(false);
  });

  it("approves the shipped pi and hermes runtimes with their configured images only", () => {
    const piImage = `registry.internal:443/pi@sha256:${"d".repeat(64)}`;
    const hermesImage = `registry.internal:443/hermes@sha256:${"e".repeat(64)}`;
    const approval = new RuntimeApproval({
      runtimes: [],
      shippedImages: { pi: piImage, hermes: hermesImage },
    });
    expect(approval.verdict(runtime("default", "pi", piImage)).approved).toBe(true);
    expect(approval.verdict(runtime("default", "hermes", hermesImage))).toEqual({
      approved: true,
      message: "the server's hermes runtime (AGENT_SESSIONS_HERMES_IMAGE)",
    });
    expect(approval.verdict(runtime("default", "hermes", piImage)).approved).toBe(false);
    expect(approval.verdict(runtime("team-a", "hermes", hermesImage)).approved).toBe(false);
  });

  it("reads its lists from the server's environment", () => {
    const config = parseConfig({
      AGENT_SESSIONS_DATA_DIR: "/tmp/as-approval-config",
      AGENT_SESSIONS_TOKEN: "admin-token-0123456789abcdef",
      AGENT_SESSIONS_RUNNER_TOKEN: "runner-token-0123456789abcdef",
      AGENT_SESSIONS_APPROVED_REGISTRIES: "Registry.Internal:443, 127.0.0.1:5000",
      AGENT_SESSIONS_APPROVED_RUNTIMES: "team-a/*,default/chat",
    });
    expect(config.approvedRegistries).toEqual(["registry.internal:443", "127.0.0.1:5000"]);
    expect(config.approvedRuntimes).toEqual(["team-a/*", "default/chat"]);
    expect(() =>
      parseConfig({
        AGENT_SESSIONS_DATA_DIR: "/tmp/as-approval-config",
        AGENT_SESSIONS_APPROVED_RUNTIMES: "Team/X",
      }),
    ).toThrow(/"Team\/X" is not namespace\/name/);
  });
});

describe("approval through the API", () => {
  let t: TestServer | undefined;
  afterEach(async () => {
    await t?.close();
    t = undefined;
  });

  it("a PUT with approved: true does not approve a runtime the configuration does not", async () => {
    t = await startTestServer();
    const runner = await t.runner();
    const put = await t.put("/v1/namespaces/default/agentruntimes/foreign", {
      apiVersion: API,
      kind: "AgentRuntime",
      metadata: { name: "foreign" },
      spec: { image: FOREIGN_IMAGE, contract: "v1alpha2", approved: true },
      status: { approved: true, message: "trust me" },
    });
    expect(put.status).toBe(201);
    expect(put.body.status).toMatchObject({ approved: false, message: expect.stringMatching(/r.example/) });
    expect(put.body.spec).not.toHaveProperty("approved");
    await t.put("/v1/namespaces/default/agents/eve", {
      apiVersion: API,
      kind: "Agent",
      metadata: { name: "eve" },
      spec: { runtimeRef: "foreign" },
    });
    const spawned = await t.rpc("SpawnAgent", { agent_ref: "eve", client_request_id: "e1" });
    expect(spawned.status).toBe(412);
    expect(spawned.body).toMatchObject({
      code: "FAILED_PRECONDITION",
      details: { reason: "RuntimeNotApproved" },
    });
    expect(String(spawned.body.message)).toMatch(/AgentRuntime default\/foreign is not approved: its image/);
    expect(runner.commandsOf("provision")).toEqual([]);
  });

  it("the shipped reference runtime is approved by default", async () => {
    t = await startTestServer();
    const read = await fetch(`${t.server.url}/v1/namespaces/default/agentruntimes/reference`, {
      headers: { authorization: `Bearer ${t.server.config.adminToken}` },
    });
    expect(await read.json()).toMatchObject({ status: { approved: true } });
    await t.runner();
    expect((await t.rpc("SpawnAgent", { agent_ref: "alice", client_request_id: "a1" })).status).toBe(200);
  });
});
