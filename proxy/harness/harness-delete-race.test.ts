/**
 * Delete wins (issue 34 item 11a): a DELETE that arrives while the session's provision is in
 * flight starts nothing in the workspace that provision makes, and removes it.
 */
import { describe, expect, it } from "vitest";
import type { RunnerCommand } from "../../contracts/runner-protocol.ts";
import { defaultHandler } from "../testing/fake-runner.ts";
import { serverPerTest } from "../testing/test-server.ts";
import { until } from "../../test/support/until.ts";

const BASE = "/v1/namespaces/default/harnesssessions";
const t = serverPerTest();

describe("a DELETE while the session's provision is in flight", () => {
  it("sends no start for the deleted session and removes what the provision made", async () => {
    let finishProvision!: () => void;
    const provisioned = new Promise<void>((r) => {
      finishProvision = r;
    });
    const runner = await t().runner({
      handler: async (command: RunnerCommand) => {
        if (command.kind === "provision") await provisioned;
        return defaultHandler(command);
      },
    });
    const created = await t().call("PUT", `${BASE}/racing`, {
      apiVersion: "agent-sessions.dev/v1alpha1",
      kind: "HarnessSession",
      metadata: { name: "racing" },
      spec: { agentRef: "alice", runtimeRef: "reference" },
    });
    expect(created.status).toBe(201);
    await runner.until(() => runner.commandsOf("provision").length === 1);
    const deleting = t().call("DELETE", `${BASE}/racing`);
    // The DELETE is marked (no request is admitted) before the provision answers.
    await until("deletion marked", async () => {
      const s = (await t().call("GET", `${BASE}/racing`)).body;
      return s.metadata?.deletionTimestamp ? true : undefined;
    });
    finishProvision();
    const deleted = await deleting;
    expect(deleted.status, JSON.stringify(deleted.body)).toBeLessThan(300);
    expect((await t().call("GET", `${BASE}/racing`)).status).toBe(404);
    const kinds = runner.commands.map((c) => c.kind).filter((k) => k !== "warm_pools" && k !== "probe");
    expect(kinds).toEqual(["provision", "remove"]);
  });
});
