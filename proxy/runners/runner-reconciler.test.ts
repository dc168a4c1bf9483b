/**
 * PROTOCOL.md §3 on a (re)attach, for the sessions a runner reports that the store does not place
 * on it: what a runner restored on its engine is its own to remove when the server no longer holds
 * the workspace (issue 34 item 11c), and another runner's workspace is never touched.
 */
import { afterEach, expect, it } from "vitest";
import { startTestServer, type TestServer } from "../testing/test-server.ts";

let t: TestServer | undefined;
afterEach(async () => {
  await t?.close();
  t = undefined;
});

it("a restored session of a workspace the server no longer holds: removed on the runner that reported it, not adopted", async () => {
  t = await startTestServer();
  const gone = "ws-default-gone-0000";
  const runner = await t.runner({
    name: "restarted",
    sessions: [{ session_id: "s-gone", container_name: gone, state: "READY" }],
  });
  await runner.until(() => runner.commandsOf("remove").length > 0);
  expect(runner.commandsOf("remove").map((c) => c.container_name)).toEqual([gone]);
  const status = await t.rpc("GetAgentStatus", { session_id: "s-gone" });
  expect(status.body).toMatchObject({ code: "NOT_FOUND" });
});

it("a reported session whose workspace the server places on another runner: left alone (no remove there or here)", async () => {
  t = await startTestServer();
  const holder = await t.runner({ name: "holder" });
  const provisioned = await t.rpc("ProvisionAgentWorkspace", { agent_ref: "alice" });
  const container = provisioned.body.container_name as string;
  const other = await t.runner({
    name: "other",
    sessions: [{ session_id: "s-foreign", container_name: container, state: "READY" }],
  });
  // The hello's reconcile is done before the welcome's sender gets the next command.
  await new Promise((r) => setTimeout(r, 300));
  expect(other.commandsOf("remove")).toEqual([]);
  expect(holder.commandsOf("remove")).toEqual([]);
  expect((await t.rpc("GetAgentStatus", { session_id: "s-foreign" })).body).toMatchObject({
    code: "NOT_FOUND",
  });
});
