import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import type { RunnerInfo } from "../../contracts/runners.ts";
import { SqliteStore } from "../store/sqlite-store.ts";
import { startTestServer, type TestServer } from "../testing/test-server.ts";
import { until } from "../../test/support/until.ts";

// biome-ignore lint/suspicious/noExplicitAny: JSON bodies of many shapes, read by assertions
type Json = any;

let t: TestServer;

beforeEach(async () => {
  t = await startTestServer({ idleCheckMs: 100 });
});
afterEach(async () => {
  vi.restoreAllMocks();
  await t.close();
});

async function get(path: string): Promise<Json> {
  const response = await fetch(`${t.server.url}${path}`, {
    headers: { authorization: `Bearer ${t.server.config.adminToken}` },
  });
  return response.json();
}

describe("one capacity for every way a workspace is placed", () => {
  it("RPC provisions and HarnessSession provisions racing for one runner never exceed its capacity", async () => {
    const runner = await t.runner({ name: "small", capacity: 2 });
    await until("runner connected", async () => {
      const items = (await get("/v1/runners")).items as RunnerInfo[];
      return items.some((r) => r.runner_name === "small" && r.connected) ? true : undefined;
    });
    // A slow store: between reading each runner's load and recording the new workspace there is
    // time for another placement to read the same load. Only the placement lock keeps them apart.
    const countLoad = SqliteStore.prototype.countWorkspacesByRunner;
    vi.spyOn(SqliteStore.prototype, "countWorkspacesByRunner").mockImplementation(async function (
      this: SqliteStore,
    ) {
      const load = await countLoad.call(this);
      await new Promise((r) => setTimeout(r, 20));
      return load;
    });
    const names = Array.from({ length: 4 }, (_, i) => `chat-${i}`);
    // Both paths at once: four HarnessSessions (their controller provisions) and four RPCs.
    const [rpcs] = await Promise.all([
      Promise.all(
        Array.from({ length: 4 }, (_, i) =>
          t.rpc("ProvisionAgentWorkspace", {
            agent_ref: "alice",
            workstream: `w${i}`,
            client_request_id: "",
          }),
        ),
      ),
      Promise.all(
        names.map((name) =>
          t.put(`/v1/namespaces/default/harnesssessions/${name}`, {
            apiVersion: "agent-sessions.dev/v1alpha1",
            kind: "HarnessSession",
            metadata: { name },
            spec: { agentRef: "alice", runtimeRef: "reference" },
          }),
        ),
      ),
    ]);
    // Every HarnessSession has left provisioning: placed (starting or beyond) or told there is no room.
    await until("HarnessSessions placed or unschedulable", async () => {
      for (const name of names) {
        const status = (await get(`/v1/namespaces/default/harnesssessions/${name}`)).status;
        const ready = (status?.conditions as { type: string; reason: string }[] | undefined)?.find(
          (c) => c.type === "Ready",
        );
        if (!ready || ready.reason === "Provisioning") return undefined;
        if (ready.reason !== "Unschedulable" && !status.containerName) return undefined;
      }
      return true;
    });
    const items = (await get("/v1/runners")).items as RunnerInfo[];
    expect(items.find((r) => r.runner_name === "small")?.load).toBeLessThanOrEqual(2);
    // The room was taken, not lost: exactly two workspaces were placed between both paths.
    expect(runner.commandsOf("provision")).toHaveLength(2);
    expect(rpcs.filter((r) => r.status === 200).length).toBeLessThanOrEqual(2);
  });
});
