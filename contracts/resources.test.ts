import { describe, expect, it } from "vitest";
import { describeIssue, issueField } from "./issue-message.ts";
import { parseOrThrow } from "./errors.ts";
import { AgentRuntimeSpec, AgentSpec, AgentView, AgentWrite, API_VERSION } from "./resources.ts";

const model = { baseUrl: "http://10.213.0.1:11434/v1", name: "tiny" };

/** `field: description` of each issue, as the API's INVALID_ARGUMENT says it; undefined when valid. */
const refusal = (spec: unknown) => {
  const parsed = AgentSpec.safeParse(spec);
  return parsed.success
    ? undefined
    : parsed.error.issues.map((i) => `${issueField(i)}: ${describeIssue(i, spec)}`).join("; ");
};

describe("AgentSpec model", () => {
  it("accepts allowedModels that contain the model the session is configured with", () => {
    expect(
      refusal({ runtimeRef: "r", model: { ...model, allowedModels: ["tiny", "small"] } }),
    ).toBeUndefined();
    expect(refusal({ runtimeRef: "r", model })).toBeUndefined();
  });

  it("refuses allowedModels without model.name, naming the field", () => {
    expect(refusal({ runtimeRef: "r", model: { ...model, allowedModels: ["small"] } })).toBe(
      "model.allowedModels: must contain model.name: the session is configured with that model, and the gateway would refuse every call it makes",
    );
  });

  it("refuses it in the shapes a client writes and reads too", () => {
    const agent = {
      apiVersion: API_VERSION,
      kind: "Agent",
      metadata: { name: "a" },
      spec: { runtimeRef: "r", credentials: [], model: { ...model, allowedModels: ["small"] } },
    };
    expect(AgentWrite.safeParse(agent).success).toBe(false);
    expect(AgentView.safeParse(agent).success).toBe(false);
  });

  it.each(["file:///etc/passwd", "ftp://x", "javascript:alert(1)", "10.213.0.1:11434/v1"])(
    "refuses a baseUrl that is not http(s): %s",
    (baseUrl) => {
      expect(refusal({ runtimeRef: "r", model: { ...model, baseUrl } })).toBe(
        "model.baseUrl: must be an http:// or https:// URL",
      );
    },
  );
});

describe("AgentSpec limits", () => {
  it("accepts whole positive budgets up to their bounds", () => {
    expect(
      refusal({ runtimeRef: "r", limits: { tokensPerDay: 1_000_000_000_000, requestsPerMinute: 1_000_000 } }),
    ).toBeUndefined();
    expect(refusal({ runtimeRef: "r", limits: {} })).toBeUndefined();
  });

  it.each([
    [{ tokensPerDay: -1 }, "limits.tokensPerDay: must be at least 1"],
    [{ tokensPerDay: 0 }, "limits.tokensPerDay: must be at least 1"],
    [{ requestsPerMinute: 1.5 }, "limits.requestsPerMinute: must be a whole number"],
    [{ requestsPerMinute: 1_000_001 }, "limits.requestsPerMinute: must be at most 1000000"],
    [{ tokensPerDay: 1e13 }, "limits.tokensPerDay: must be at most 1000000000000"],
    [{ tokensPerHour: 5 }, "limits.tokensPerHour: is not a field"],
  ])("refuses %j", (limits, expected) => {
    expect(refusal({ runtimeRef: "r", limits })).toContain(expected);
  });
});

describe("AgentRuntimeSpec session (an openai-chat runtime, issue 41)", () => {
  const image = `127.0.0.1:5000/x@sha256:${"a".repeat(64)}`;
  const parse = (session: unknown) => {
    try {
      return parseOrThrow(AgentRuntimeSpec, { image, contract: "v1alpha2", session }, "spec");
    } catch (error) {
      return (error as Error).message;
    }
  };

  it("takes openai-chat on a port the harness can listen on", () => {
    expect(parse({ protocol: "openai-chat", port: 9090 })).toMatchObject({
      session: { protocol: "openai-chat", port: 9090 },
    });
    expect(parse({ protocol: "openai-chat", port: 1024 })).toMatchObject({ session: { port: 1024 } });
    expect(parse({ protocol: "openai-chat", port: 65535 })).toMatchObject({ session: { port: 65535 } });
  });

  it("refuses another protocol, a port out of range or not an integer, a missing port or an unknown field, naming it", () => {
    expect(parse({ protocol: "sympozium", port: 9090 })).toBe(
      'invalid spec: session.protocol: must be "openai-chat" (leave session out for our adapter contract)',
    );
    for (const port of [0, 80, 1023, 65536, 9090.5, "9090"])
      expect(parse({ protocol: "openai-chat", port })).toBe(
        "invalid spec: session.port: must be an integer from 1024 to 65535",
      );
    expect(parse({ protocol: "openai-chat" })).toBe("invalid spec: session.port: is required");
    expect(parse({ protocol: "openai-chat", port: 9090, path: "/x" })).toMatch(
      /^invalid spec: session\.path: /,
    );
  });

  it("refuses a one-shot contract or an agent command beside it, naming the field", () => {
    const session = { protocol: "openai-chat", port: 9090 };
    const refused = (spec: Record<string, unknown>) => {
      try {
        parseOrThrow(AgentRuntimeSpec, { image, contract: "v1alpha2", session, ...spec }, "spec");
        return "accepted";
      } catch (error) {
        return (error as Error).message;
      }
    };
    expect(refused({ contract: "v1alpha1" })).toMatch(
      /^invalid spec: contract: must be v1alpha2 with session/,
    );
    expect(refused({ agent: { command: ["/bin/agent"] } })).toMatch(
      /^invalid spec: agent: must be absent with session/,
    );
    expect(refused({})).toBe("accepted");
  });
});
