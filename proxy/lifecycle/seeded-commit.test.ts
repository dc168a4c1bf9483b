import { describe, expect, it } from "vitest";
import { RUNNER_PROTOCOL_VERSION, type RunnerCommand } from "../../contracts/runner-protocol.ts";
import { defaultHandler, type FakeRunner, type Reply } from "../testing/fake-runner.ts";
import { ADMIN_TOKEN, serverPerTest } from "../testing/test-server.ts";

// Issue 34 item 12: the diff's baseline is the commit the runner saw the seed fetch, kept by the
// server with the workspace and sent with every diff, never a ref read in the agent's checkout.

const t = serverPerTest();
const FIRST = "1".repeat(40);
const RESEEDED = "2".repeat(40);
const repo = { url: "http://10.213.0.1:11434/team/app.git" };

/** A runner whose provisions say `seeded[i]` (undefined: fetched nothing) and whose diffs answer empty. */
function seedingRunner(seeded: (string | undefined)[]) {
  let provisions = 0;
  return (runner: () => FakeRunner) =>
    (command: RunnerCommand): Reply | Promise<Reply> => {
      if (command.kind === "provision") {
        const commit = seeded[provisions++];
        return {
          ok: true,
          result: {
            container_name: command.container_name,
            endpoint: "10.213.0.9:8080",
            ...(commit ? { seeded_commit: commit } : {}),
          },
        };
      }
      if (command.kind === "workspace_read") {
        runner().send({
          version: RUNNER_PROTOCOL_VERSION,
          type: "relay_chunk",
          payload: { relay_id: command.relay_id, data: "", done: true },
        });
        return { ok: true, result: { size: 0 } };
      }
      return defaultHandler(command);
    };
}

async function diff(container: string): Promise<Response> {
  return fetch(`${t().server.url}/v1/workspaces/${container}/workspace:diff`, {
    headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
  });
}

async function provision(requestId: string) {
  const r = await t().rpc("ProvisionAgentWorkspace", {
    agent_ref: "alice",
    workstream: { name: "main", repo },
    client_request_id: requestId,
  });
  expect(r.status, JSON.stringify(r.body)).toBe(200);
  return String(r.body.container_name);
}

describe("the commit a workspace was seeded at (issue 34 item 12)", () => {
  it("is kept from the seeding provision and sent with every diff; a provision that fetched nothing leaves it, a new seed replaces it", async () => {
    let runner: FakeRunner | undefined;
    const handler = seedingRunner([FIRST, undefined, RESEEDED])(() => runner as FakeRunner);
    runner = await t().runner({ handler });
    const container = await provision("p-1");
    expect((await diff(container)).status).toBe(200);
    // Again, the checkout there: the runner says no commit, the recorded one is the baseline still.
    await provision("p-2");
    expect((await diff(container)).status).toBe(200);
    // The checkout was gone and fetched again: what this runner saw fetched is the baseline now.
    await provision("p-3");
    expect((await diff(container)).status).toBe(200);
    expect(runner.commandsOf("workspace_read").map((c) => [c.what, c.seeded_commit])).toEqual([
      ["diff", FIRST],
      ["diff", FIRST],
      ["diff", RESEEDED],
    ]);
  });

  it("unknown (the seed's answer never said it): the diff is 412 SeededCommitUnknown and nothing is asked of the runner", async () => {
    let runner: FakeRunner | undefined;
    runner = await t().runner({ handler: seedingRunner([undefined])(() => runner as FakeRunner) });
    const container = await provision("p-1");
    const refused = await diff(container);
    expect(refused.status).toBe(412);
    expect(await refused.json()).toMatchObject({
      code: "FAILED_PRECONDITION",
      details: { reason: "SeededCommitUnknown" },
    });
    expect(runner.commandsOf("workspace_read")).toEqual([]);
  });

  it("a runner's seeded_commit that is not a full commit id is refused at the boundary, never stored", async () => {
    let runner: FakeRunner | undefined;
    runner = await t().runner({ handler: seedingRunner(["HEAD"])(() => runner as FakeRunner) });
    const r = await t().rpc("ProvisionAgentWorkspace", {
      agent_ref: "alice",
      workstream: { name: "main", repo },
      client_request_id: "p-1",
    });
    expect(r.status).not.toBe(200);
    expect(runner.commandsOf("workspace_read")).toEqual([]);
  });
});
