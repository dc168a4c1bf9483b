import { afterEach, beforeEach, describe, expect, it } from "vitest";
import type { RunnerDirectory } from "../lifecycle/runner-directory.ts";
import { SqliteStore } from "../store/sqlite-store.ts";
import { testApp } from "../testing/test-app.ts";
import type { RunnerRecord } from "../store/store.ts";

let store: SqliteStore;
let connected: RunnerRecord[];

const runner = (name: string, draining = false): RunnerRecord => ({
  runner_id: `id-${name}`,
  runner_name: name,
  engine: "docker",
  capacity: 10,
  labels: {},
  draining,
  last_seen_at: "",
});

function build() {
  const runners: RunnerDirectory = {
    connectedRunners: () => connected,
    isConnected: () => connected.length > 0,
    command: async () =>
      ({ ok: false, error: { code: "UNAVAILABLE", message: "not in this test" } }) as never,
  };
  return testApp(store, runners, { runners });
}

beforeEach(() => {
  store = new SqliteStore(":memory:");
  connected = [];
});
afterEach(async () => {
  await store.close();
});

describe("GET /readyz says whether a runner can serve", () => {
  it("says no runner can serve while none is connected (sessions would stay Pending)", async () => {
    const reply = await build().request("/readyz");
    // 200 all the same: a control-plane pod must be Ready for runners to reach it through its Service.
    expect(reply.status).toBe(200);
    const body = (await reply.json()) as { status: string; message?: string; runners: unknown };
    expect(body.status).toBe("no_runner");
    expect(body.runners).toEqual({ connected: 0, accepting: 0 });
    expect(body.message).toMatch(/no runner is connected.*Pending.*agent-sessions runner/);
  });

  it("says no runner can serve when every connected runner is draining", async () => {
    connected = [runner("a", true)];
    const body = (await (await build().request("/readyz")).json()) as { status: string; message?: string };
    expect(body.status).toBe("no_runner");
    expect(body.message).toMatch(/every connected runner is draining: a/);
  });

  it("is ready once a runner takes work", async () => {
    connected = [runner("a", true), runner("b")];
    const reply = await build().request("/readyz");
    expect(reply.status).toBe(200);
    expect(await reply.json()).toEqual({ status: "ready", runners: { connected: 2, accepting: 1 } });
  });
});
