/**
 * A Pending HarnessSession says why no runner can serve it (issue 34 item 2): none connected,
 * every runner draining, every runner full, or the runner holding its workspace gone; each with
 * what to do. "no runner is connected; retrying" alone left a user guessing.
 */
import { describe, expect, it } from "vitest";
import { serverPerTest } from "../testing/test-server.ts";
import { until } from "../../test/support/until.ts";

// biome-ignore lint/suspicious/noExplicitAny: JSON bodies of many shapes, read by assertions
type Json = any;

const BASE = "/v1/namespaces/default/harnesssessions";
const t = serverPerTest();

async function create(name: string): Promise<void> {
  const created = await t().call("PUT", `${BASE}/${name}`, {
    apiVersion: "agent-sessions.dev/v1alpha1",
    kind: "HarnessSession",
    metadata: { name },
    spec: { agentRef: "alice", runtimeRef: "reference" },
  });
  expect(created.status).toBe(201);
}

/** The Ready condition once the session is Pending with a reason other than the first one's. */
const pendingReady = (name: string, match: RegExp) =>
  until(`${name} Pending matching ${match}`, async () => {
    const s: Json = (await t().call("GET", `${BASE}/${name}`)).body;
    const ready = s.status.conditions.find((c: { type: string }) => c.type === "Ready");
    return s.status.phase === "Pending" && match.test(ready?.message ?? "") ? ready : undefined;
  });

describe("a Pending HarnessSession names why no runner can serve it", () => {
  it("says no runner is connected and how to start one", async () => {
    await create("lonely");
    const ready = await pendingReady("lonely", /no runner/);
    expect(ready.reason).toBe("RunnerUnavailable");
    expect(ready.message).toMatch(/no runner is connected.*agent-sessions runner --server/);
    expect(ready.message).toMatch(/retrying/);
  });

  it("says every runner is draining, naming them and how to undrain", async () => {
    await t().runner({ name: "r1" });
    expect((await t().call("POST", "/v1/runners/r1:drain")).status).toBe(200);
    await create("drained");
    const ready = await pendingReady("drained", /draining/);
    expect(ready.reason).toBe("Unschedulable");
    expect(ready.message).toMatch(/every connected runner is draining: r1.*agent-sessions undrain r1/);
  });

  it("says every runner is at capacity, naming them and their load", async () => {
    await t().runner({ name: "small", capacity: 1 });
    await create("first");
    await until("first Ready", async () =>
      (await t().call("GET", `${BASE}/first`)).body.status.phase === "Ready" ? true : undefined,
    );
    await create("second");
    const ready = await pendingReady("second", /capacity/);
    expect(ready.reason).toBe("Unschedulable");
    expect(ready.message).toMatch(
      /at capacity: small \(1\/1\).*start another runner, or raise.*AGENT_SESSIONS_RUNNER_CAPACITY/,
    );
  });

  it("says the runner holding its workspace is not connected, naming it, when it resumes without it", async () => {
    const r1 = await t().runner({ name: "r1" });
    await create("held");
    await until("held Ready", async () =>
      (await t().call("GET", `${BASE}/held`)).body.status.phase === "Ready" ? true : undefined,
    );
    const spec = { agentRef: "alice", runtimeRef: "reference" };
    const put = (desiredState: string) =>
      t().call("PUT", `${BASE}/held`, {
        apiVersion: "agent-sessions.dev/v1alpha1",
        kind: "HarnessSession",
        metadata: { name: "held" },
        spec: { ...spec, desiredState },
      });
    expect((await put("stopped")).status).toBe(200);
    await until("held Stopped", async () =>
      (await t().call("GET", `${BASE}/held`)).body.status.phase === "Stopped" ? true : undefined,
    );
    r1.kill();
    await t().runner({ name: "r2" }); // another runner cannot take it: the volume is on r1
    expect((await put("running")).status).toBe(200);
    const ready = await pendingReady("held", /r1/);
    expect(ready.reason).toBe("RunnerUnavailable");
    expect(ready.message).toMatch(
      /runner r1, which holds workspace .*, is not connected; start runner r1 again/,
    );
  });
});
