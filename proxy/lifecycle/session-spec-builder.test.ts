import { describe, expect, it } from "vitest";
import { Agent, AgentRuntime } from "../../contracts/resources.ts";
import { CodedError } from "../../contracts/errors.ts";
import { offeredCredentialEnv } from "./credential-env.ts";
import { assertSessionRuntime, buildSessionSpec, resolveCredentials } from "./session-spec-builder.ts";
import { testAdmission } from "../testing/test-admission.ts";
import { TEST_IMAGE } from "../testing/test-server.ts";

const runtime = (spec: Record<string, unknown> = {}) =>
  AgentRuntime.parse({
    apiVersion: "agent-sessions.dev/v1alpha1",
    kind: "AgentRuntime",
    metadata: { name: "rt" },
    spec: { image: TEST_IMAGE, contract: "v1alpha2", approved: true, ...spec },
  });
const agent = (spec: Record<string, unknown> = {}) =>
  Agent.parse({
    apiVersion: "agent-sessions.dev/v1alpha1",
    kind: "Agent",
    metadata: { name: "alice" },
    spec: { runtimeRef: "rt", ...spec },
  });

describe("session spec from an Agent and its runtime", () => {
  it("takes image and contract from the runtime, streaming only when declared", () => {
    const plain = buildSessionSpec({
      namespace: "default",
      name: "w",
      engine: "docker",
      agent: agent(),
      runtime: runtime(),
    });
    expect(plain).toMatchObject({
      image: TEST_IMAGE,
      contract: "v1alpha2",
      streaming: false,
      env: {},
      egress: [],
    });
    const streaming = buildSessionSpec({
      namespace: "default",
      name: "w",
      engine: "docker",
      agent: agent({
        model: { baseUrl: "http://10.0.0.1:8000/v1", name: "m" },
        egress: [{ cidr: "10.0.0.1", port: 8000 }],
      }),
      runtime: runtime({ capabilities: ["streaming"] }),
      admission: testAdmission(),
    });
    expect(streaming).toMatchObject({
      streaming: true,
      env: { MODEL_BASE_URL: "http://10.0.0.1:8000/v1", MODEL_NAME: "m" },
      egress: [{ cidr: "10.0.0.1", port: 8000 }],
    });
  });

  it("keeps the runtime's agent command with its image; none declared: none in the spec", () => {
    const build = (rt: AgentRuntime) =>
      buildSessionSpec({ namespace: "default", name: "w", engine: "docker", agent: agent(), runtime: rt });
    const command = ["/usr/local/bin/node", "/app/runtimes/pi/agent.ts"];
    expect(build(runtime({ agent: { command } })).agentCommand).toEqual(command);
    expect(build(runtime()).agentCommand).toBeUndefined();
  });

  it("keeps the runtime's openai-chat session declaration; none declared: our adapter contract", () => {
    const build = (rt: AgentRuntime) =>
      buildSessionSpec({ namespace: "default", name: "w", engine: "docker", agent: agent(), runtime: rt });
    const session = { protocol: "openai-chat" as const, port: 9090 };
    expect(build(runtime({ session })).session).toEqual(session);
    expect(build(runtime()).session).toBeUndefined();
  });

  it("refuses v1alpha1 and unapproved runtimes", () => {
    expect(() => assertSessionRuntime(runtime({ contract: "v1alpha1" }))).toThrow(/v1alpha2/);
    expect(() =>
      assertSessionRuntime(runtime({ approved: true, image: `r.example/x@sha256:${"b".repeat(64)}` })),
    ).toThrow(/not approved: its image comes from registry r.example/);
  });

  it("hands out exactly the allowlist, resolving secretRefs from the offered environment", () => {
    const a = agent({
      credentials: [
        { name: "OPENAI_API_KEY", secretRef: { env: "HOST_KEY" } },
        { name: "ORG", value: "acme" },
      ],
    });
    expect(resolveCredentials(a, { HOST_KEY: "sk-1", OTHER: "x" })).toEqual({
      OPENAI_API_KEY: "sk-1",
      ORG: "acme",
    });
    // Offered (listed) but unset: "does not set".
    expect(() => resolveCredentials(a, { HOST_KEY: undefined })).toThrow(
      /HOST_KEY, which the server's environment does not set/,
    );
  });

  it("refuses a secretRef to a variable the server does not offer, naming the credential and the variable, never a value", () => {
    const env = { HOST_KEY: "sk-1", SERVER_SECRET: "hunter2-very-secret" };
    const offered = offeredCredentialEnv(["HOST_KEY"], env);
    const a = agent({ credentials: [{ name: "OPENAI_API_KEY", secretRef: { env: "SERVER_SECRET" } }] });
    let thrown: unknown;
    try {
      resolveCredentials(a, offered);
    } catch (error) {
      thrown = error;
    }
    expect(thrown).toBeInstanceOf(CodedError);
    const coded = thrown as CodedError;
    expect(coded.code).toBe("FAILED_PRECONDITION");
    expect(coded.message).toMatch(
      /credential OPENAI_API_KEY of Agent [a-z]*\/alice refers to environment variable SERVER_SECRET, which the server does not offer to sessions/,
    );
    expect(coded.details).toMatchObject({
      reason: "CredentialNotOffered",
      credential: "OPENAI_API_KEY",
      variable: "SERVER_SECRET",
    });
    expect(JSON.stringify({ m: coded.message, d: coded.details })).not.toContain("hunter2");
  });

  it("never hands out the server's own AGENT_SESSIONS_* settings, even from an unfiltered environment", () => {
    const a = agent({
      credentials: [{ name: "OPENAI_API_KEY", secretRef: { env: "AGENT_SESSIONS_TOKEN" } }],
    });
    expect(() => resolveCredentials(a, { AGENT_SESSIONS_TOKEN: "admin-token-value" })).toThrow(
      /AGENT_SESSIONS_TOKEN, which the server does not offer/,
    );
  });
});

describe("credentials offered per namespace", () => {
  const inNamespace = (namespace: string) =>
    Agent.parse({
      apiVersion: "agent-sessions.dev/v1alpha1",
      kind: "Agent",
      metadata: { name: "alice", namespace },
      spec: { runtimeRef: "rt", credentials: [{ name: "OPENAI_API_KEY", secretRef: { env: "TEAM_A_KEY" } }] },
    });
  const offered = offeredCredentialEnv(["team-a/TEAM_A_KEY", "SHARED"], {
    TEAM_A_KEY: "a-secret",
    SHARED: "s",
  });

  it("gives a variable offered to one namespace to that namespace's Agents", () => {
    expect(resolveCredentials(inNamespace("team-a"), offered)).toEqual({ OPENAI_API_KEY: "a-secret" });
  });

  it("refuses it to another namespace's Agent as CredentialNotOffered, naming the namespace, never the value", () => {
    let thrown: unknown;
    try {
      resolveCredentials(inNamespace("team-b"), offered);
    } catch (error) {
      thrown = error;
    }
    expect(thrown).toBeInstanceOf(CodedError);
    const coded = thrown as CodedError;
    expect(coded.code).toBe("FAILED_PRECONDITION");
    expect(coded.details).toMatchObject({ reason: "CredentialNotOffered", variable: "TEAM_A_KEY" });
    expect(coded.message).toMatch(/does not offer to sessions of namespace team-b/);
    expect(JSON.stringify({ m: coded.message, d: coded.details })).not.toContain("a-secret");
  });
});
