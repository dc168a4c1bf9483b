import { describe, expect, it } from "vitest";
import { Agent, AgentRuntime } from "../contracts/resources.ts";
import { assertSessionRuntime, buildSessionSpec, resolveCredentials } from "./session-spec-builder.ts";
import { TEST_IMAGE } from "./testing/test-server.ts";

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
    });
    expect(streaming).toMatchObject({
      streaming: true,
      env: { MODEL_BASE_URL: "http://10.0.0.1:8000/v1", MODEL_NAME: "m" },
      egress: [{ cidr: "10.0.0.1", port: 8000 }],
    });
  });

  it("refuses v1alpha1 and unapproved runtimes", () => {
    expect(() => assertSessionRuntime(runtime({ contract: "v1alpha1" }))).toThrow(/v1alpha2/);
    expect(() => assertSessionRuntime(runtime({ approved: false }))).toThrow(/not approved/);
  });

  it("hands out exactly the allowlist, resolving secretRefs from the server's environment", () => {
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
    expect(() => resolveCredentials(a, {})).toThrow(/HOST_KEY/);
  });
});
