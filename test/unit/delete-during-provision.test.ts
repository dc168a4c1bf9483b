/**
 * Delete wins over a provision in flight (issue 34 item 11a): when the server stopped waiting for
 * a provision (its deadline passed, its link or process went) and a DELETE then sends `remove`,
 * the runner must not let the late provision leave a workload running. A real server, the real
 * Runner over the real WebSocket, an in-memory engine whose provision is slow.
 */
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import type { SessionSpec } from "../../contracts/session-spec.ts";
import { RUNNER_TOKEN, startTestServer, type TestServer } from "../../proxy/testing/test-server.ts";
import { parseRunnerConfig } from "../../runner/config.ts";
import type { Secrets } from "../../runner/engine/fast-path.ts";
import { FakeDriver, fakeMachine } from "../../runner/engine/fake-driver.ts";
import { Runner } from "../../runner/runner.ts";
import { until } from "../support/until.ts";

const BASE = "/v1/namespaces/default/harnesssessions";

/** An engine whose provision takes `delayMs` before it makes the workload. */
class SlowDriver extends FakeDriver {
  delayMs = 0;
  /** Provisions asked for, before they start. */
  asked = 0;
  override async provision(containerName: string, spec: SessionSpec, secrets: Secrets) {
    this.asked += 1;
    await new Promise((r) => setTimeout(r, this.delayMs));
    return super.provision(containerName, spec, secrets);
  }
}

let t: TestServer;
let runner: Runner;
let driver: SlowDriver;

beforeEach(async () => {
  // The server stops waiting for a command after 300 ms; the engine takes 500 ms to provision.
  t = await startTestServer({ commandTimeoutMs: 300 });
  driver = new SlowDriver({ machine: fakeMachine() });
  runner = new Runner(
    parseRunnerConfig({
      AGENT_SESSIONS_SERVER_URL: t.server.url,
      AGENT_SESSIONS_RUNNER_TOKEN: RUNNER_TOKEN,
      AGENT_SESSIONS_RUNNER_DATA_DIR: `${t.dataDir}/runner`,
      // The model gateway on loopback: the test Agent has a model.
      AGENT_SESSIONS_GATEWAY_ADDRESS: "127.0.0.1:0",
      AGENT_SESSIONS_RUNNER_NAME: "embedded",
    }),
    driver,
    () => {},
  );
  await runner.start();
  await until("runner attached", async () =>
    (await t.call("GET", "/v1/runners")).body.items?.some((r: { connected: boolean }) => r.connected)
      ? true
      : undefined,
  );
});

afterEach(async () => {
  runner.stop();
  await t.close();
});

describe("a DELETE after a provision the server stopped waiting for", () => {
  it("leaves nothing running once the late provision ends", async () => {
    driver.delayMs = 500; // past the server's deadline, and over before the remove's
    const created = await t.call("PUT", `${BASE}/late`, {
      apiVersion: "agent-sessions.dev/v1alpha1",
      kind: "HarnessSession",
      metadata: { name: "late" },
      spec: { agentRef: "alice", runtimeRef: "reference" },
    });
    expect(created.status).toBe(201);
    await until("provision sent", async () => (driver.asked > 0 ? true : undefined));
    const deleted = await t.call("DELETE", `${BASE}/late`);
    expect(deleted.status, JSON.stringify(deleted.body)).toBeLessThan(300);
    expect((await t.call("GET", `${BASE}/late`)).status).toBe(404);
    // The late provision has ended by now.
    await new Promise((r) => setTimeout(r, 1_500));
    expect([...driver.machine.running]).toEqual([]);
  });
});
