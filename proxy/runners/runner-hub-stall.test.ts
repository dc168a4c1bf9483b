import { describe, expect, it } from "vitest";
import { singleReplica } from "../cluster/replica-cluster.ts";
import { defaultSettings } from "../config.ts";
import { EventBus } from "../lifecycle/event-bus.ts";
import { SessionJournal } from "../lifecycle/session-journal.ts";
import { SqliteStore } from "../store/sqlite-store.ts";
import { ADMIN_TOKEN, RUNNER_TOKEN } from "../testing/test-server.ts";
import { RunnerHub } from "./runner-hub.ts";

describe("the lease holder's sweep of lost replicas after a stall of its own", () => {
  it("waits an interval: replicas stopped with it get to beat again before their silence counts", async () => {
    const store = new SqliteStore(":memory:");
    const sweeps: number[] = [];
    const hub = new RunnerHub({
      store,
      journal: new SessionJournal(store, new EventBus()),
      adminToken: ADMIN_TOKEN,
      runnerToken: RUNNER_TOKEN,
      ...defaultSettings(),
      registration: "open",
      heartbeatMs: 50,
      // A shared cluster this replica leads: every tick refreshes the links, then sweeps.
      cluster: {
        ...singleReplica(),
        shared: true,
        refreshLinks: async () => {
          sweeps.push(performance.now());
        },
      },
    });
    try {
      await expect.poll(() => sweeps.length).toBeGreaterThanOrEqual(2);
      // Block the process for 10 intervals, as a paused machine does.
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 500);
      const resumed = performance.now();
      const after = () => sweeps.filter((t) => t >= resumed);
      await expect.poll(() => after().length, { timeout: 5_000 }).toBeGreaterThanOrEqual(1); // sweeping goes on
      // The tick that found the stall (due at once) did not sweep; the next one, an interval on, did.
      expect(after()[0]! - resumed).toBeGreaterThanOrEqual(35);
    } finally {
      await hub.close();
      await store.close();
    }
  });
});
