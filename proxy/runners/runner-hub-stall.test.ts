import { describe, expect, it } from "vitest";
import { singleReplica } from "../cluster/replica-cluster.ts";
import { SqliteStore } from "../store/sqlite-store.ts";
import { bareHub } from "../testing/test-server.ts";

describe("the lease holder's sweep of lost replicas after a stall of its own", () => {
  it("waits an interval: replicas stopped with it get to beat again before their silence counts", async () => {
    const store = new SqliteStore(":memory:");
    const sweeps: number[] = [];
    const hub = bareHub(store, {
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
      const sweepsAfter = () => sweeps.filter((t) => t >= resumed);
      await expect.poll(() => sweepsAfter().length, { timeout: 5_000 }).toBeGreaterThanOrEqual(1); // sweeping goes on
      // The tick that found the stall (due at once) did not sweep; the next one, an interval on, did.
      expect(sweepsAfter()[0]! - resumed).toBeGreaterThanOrEqual(35);
    } finally {
      await hub.close();
      await store.close();
    }
  });
});
