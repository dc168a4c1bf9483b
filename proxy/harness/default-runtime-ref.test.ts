/**
 * A HarnessSession's `spec.runtimeRef` may be left out: it is its Agent's (issue 34 item 4). The
 * PUT refuses any other runtime, so naming it was only a chance to get it wrong. Filled in at the
 * PUT when the Agent exists (GET shows it, and it is then immutable like a named one); a session
 * applied before its Agent keeps it unset and binds to the Agent's runtime when the Agent appears.
 */
import { describe, expect, it } from "vitest";
import { until } from "../../test/support/until.ts";
import { serverPerTest } from "../testing/test-server.ts";

const BASE = "/v1/namespaces/default/harnesssessions";
const t = serverPerTest();

const session = (name: string, spec: Record<string, unknown>) => ({
  apiVersion: "agent-sessions.dev/v1alpha1",
  kind: "HarnessSession",
  metadata: { name },
  spec,
});

describe("a HarnessSession without spec.runtimeRef", () => {
  it("takes its Agent's runtime at the PUT, shows it, keeps it, and refuses another one later", async () => {
    const created = await t().call("PUT", `${BASE}/plain`, session("plain", { agentRef: "alice" }));
    expect(created.status).toBe(201);
    expect(created.body.spec.runtimeRef).toBe("reference");
    expect((await t().call("GET", `${BASE}/plain`)).body.spec.runtimeRef).toBe("reference");
    // A later PUT that leaves it out again keeps it; one naming another runtime is refused as immutable.
    const again = await t().call(
      "PUT",
      `${BASE}/plain`,
      session("plain", { agentRef: "alice", idleTimeout: "5m" }),
    );
    expect(again.status).toBe(200);
    expect(again.body.spec.runtimeRef).toBe("reference");
    const other = await t().call(
      "PUT",
      `${BASE}/plain`,
      session("plain", { agentRef: "alice", runtimeRef: "other" }),
    );
    expect(other.status).toBe(400);
    expect(other.body.message).toMatch(/spec\.runtimeRef is immutable/);
  });

  it("is accepted before its Agent exists and binds to the Agent's runtime once it appears", async () => {
    await t().runner({ name: "r1" });
    const early = await t().call("PUT", `${BASE}/early`, session("early", { agentRef: "bob" }));
    expect(early.status).toBe(201);
    expect(early.body.spec.runtimeRef).toBeUndefined();
    const bob = await t().call("PUT", "/v1/namespaces/default/agents/bob", {
      apiVersion: "agent-sessions.dev/v1alpha1",
      kind: "Agent",
      metadata: { name: "bob" },
      spec: {
        runtimeRef: "reference",
        credentials: [{ name: "OPENAI_API_KEY", value: "sk-test" }],
        model: { baseUrl: "http://10.213.0.1:11434/v1", name: "tiny" },
        egress: [{ cidr: "10.213.0.1/32", port: 11434 }],
      },
    });
    expect(bob.status).toBe(201);
    await until("early Ready", async () =>
      (await t().call("GET", `${BASE}/early`)).body.status.phase === "Ready" ? true : undefined,
    );
    // Its next PUT fills it in; from then on it is fixed.
    const filled = await t().call("PUT", `${BASE}/early`, session("early", { agentRef: "bob" }));
    expect(filled.status).toBe(200);
    expect(filled.body.spec.runtimeRef).toBe("reference");
  });
});
