import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { EventBus } from "../lifecycle/event-bus.ts";
import { Lifecycle } from "../lifecycle/lifecycle.ts";
import type { RunnerDirectory } from "../lifecycle/runner-directory.ts";
import { SessionJournal } from "../lifecycle/session-journal.ts";
import { Workspaces } from "../lifecycle/workspaces.ts";
import { silentLogger } from "../observability/log.ts";
import { SqliteStore } from "../store/sqlite-store.ts";
import type { RunnerRecord } from "../store/store.ts";
import { ADMIN_TOKEN, RUNNER_TOKEN } from "../testing/test-server.ts";
import { buildApp } from "./app.ts";

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
  const bus = new EventBus();
  const base = { store, runners, journal: new SessionJournal(store, bus), log: silentLogger };
  const lifecycle = new Lifecycle({ ...base, workspaces: new Workspaces(base) });
  return buildApp({
    store,
    bus,
    rpc: lifecycle.handlers,
    adminToken: ADMIN_TOKEN,
    runnerToken: RUNNER_TOKEN,
    runners,
  });
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
