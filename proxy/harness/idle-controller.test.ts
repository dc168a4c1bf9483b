import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { HarnessSessionSpec } from "../../contracts/harness-session.ts";
import { IdleController, idleAction, idleCutoff, pauseCutoff } from "./idle-controller.ts";
import { silentLogger } from "../observability/log.ts";
import type { HarnessStore } from "../store/harness-store.ts";
import { SqliteHarnessStore } from "../store/sqlite-harness-store.ts";

const now = new Date("2026-01-01T00:10:00.000Z");
const base = {
  phase: "Ready" as const,
  spec: {
    agentRef: "a",
    runtimeRef: "r",
    desiredState: "running" as const,
    idleTimeout: "5m",
    autoResume: false,
  },
  active_requests: 0,
  last_activity_time: "2026-01-01T00:04:00.000Z",
  deletion_requested_at: undefined,
};

describe("idleness", () => {
  it("a Ready session without activity for its idleTimeout and nothing in flight is idle", () => {
    expect(idleCutoff(base, now)).toBe("2026-01-01T00:05:00.000Z");
  });

  it("is not idle before the timeout has passed", () => {
    expect(idleCutoff({ ...base, last_activity_time: "2026-01-01T00:05:00.001Z" }, now)).toBeUndefined();
  });

  it("is never idle with a request in flight, however old the activity", () => {
    expect(idleCutoff({ ...base, active_requests: 1 }, now)).toBeUndefined();
  });

  it("idleTimeout 0 turns idle stopping off", () => {
    expect(idleCutoff({ ...base, spec: { ...base.spec, idleTimeout: "0" } }, now)).toBeUndefined();
  });

  it("a Paused session is still stopped after idleTimeout, counted from its last activity", () => {
    expect(idleCutoff({ ...base, phase: "Paused" }, now)).toBe("2026-01-01T00:05:00.000Z");
    expect(
      idleCutoff({ ...base, phase: "Paused", last_activity_time: "2026-01-01T00:06:00.000Z" }, now),
    ).toBeUndefined();
  });

  it.each(["Pending", "Draining", "Stopped", "Failed"] as const)(
    "a %s session is not stopped for idleness",
    (phase) => {
      expect(idleCutoff({ ...base, phase }, now)).toBeUndefined();
    },
  );

  it("a session being deleted or desired stopped is left to its own stop", () => {
    expect(idleCutoff({ ...base, deletion_requested_at: "2026-01-01T00:09:00.000Z" }, now)).toBeUndefined();
    expect(idleCutoff({ ...base, spec: { ...base.spec, desiredState: "stopped" } }, now)).toBeUndefined();
  });
});

describe("the paused tier", () => {
  const pausing = { ...base, spec: { ...base.spec, idleTimeout: "15m", pauseAfter: "2m" } };

  it("a Ready session idle for pauseAfter is paused, not before", () => {
    expect(pauseCutoff(pausing, now)).toBe("2026-01-01T00:08:00.000Z");
    expect(idleAction(pausing, now)).toMatchObject({ action: "pause", cutoff: "2026-01-01T00:08:00.000Z" });
    expect(pauseCutoff({ ...pausing, last_activity_time: "2026-01-01T00:08:30.000Z" }, now)).toBeUndefined();
  });

  it("pauseAfter absent or 0 never pauses; a request in flight keeps it running", () => {
    expect(pauseCutoff(base, now)).toBeUndefined();
    expect(pauseCutoff({ ...pausing, spec: { ...pausing.spec, pauseAfter: "0" } }, now)).toBeUndefined();
    expect(pauseCutoff({ ...pausing, active_requests: 1 }, now)).toBeUndefined();
  });

  it("a Paused session is not paused again, and past idleTimeout it is stopped (stop wins over pause)", () => {
    expect(pauseCutoff({ ...pausing, phase: "Paused" }, now)).toBeUndefined();
    const long = {
      ...pausing,
      phase: "Paused" as const,
      last_activity_time: "2026-01-01T00:00:00.000Z",
      spec: { ...pausing.spec, idleTimeout: "5m" },
    };
    expect(idleAction(long, now)).toMatchObject({ action: "stop", cutoff: "2026-01-01T00:05:00.000Z" });
  });

  it("desiredState paused pauses a Ready session as soon as nothing is in flight", () => {
    const desired = {
      ...base,
      last_activity_time: "2026-01-01T00:09:59.000Z",
      spec: { ...base.spec, desiredState: "paused" as const },
    };
    expect(idleAction(desired, now)).toEqual({
      action: "pause",
      cutoff: now.toISOString(),
      why: "desiredState: paused",
    });
    expect(idleAction({ ...desired, active_requests: 1 }, now)).toBeUndefined();
  });

  it("a session desired stopped or being deleted is never paused", () => {
    expect(
      pauseCutoff({ ...pausing, spec: { ...pausing.spec, desiredState: "stopped" } }, now),
    ).toBeUndefined();
    expect(
      pauseCutoff({ ...pausing, deletion_requested_at: "2026-01-01T00:09:00.000Z" }, now),
    ).toBeUndefined();
  });
});

describe("IdleController sweeps", () => {
  it("tells how long each sweep took, also one that failed", async () => {
    const seconds: number[] = [];
    let fail = false;
    const harness = {
      reapStaleRequests: async () => 0,
      listIdleCandidates: async () => {
        await new Promise((resolve) => setTimeout(resolve, 20));
        if (fail) throw new Error("store closed");
        return [];
      },
    } as unknown as HarnessStore;
    const idle = new IdleController({
      harness,
      controller: { idleStop: async () => false, pause: async () => false, resync: async () => undefined },
      log: silentLogger,
      onSweep: (s) => seconds.push(s),
    });
    await idle.tick();
    fail = true;
    await expect(idle.tick()).rejects.toThrow("store closed");
    expect(seconds).toHaveLength(2);
    for (const s of seconds) {
      expect(s).toBeGreaterThanOrEqual(0.015);
      expect(s).toBeLessThan(5);
    }
  });
});

describe("IdleController over the SQLite store", () => {
  it("stops exactly the sessions idle for their timeout", async () => {
    const dir = mkdtempSync(join(tmpdir(), "idle-sweep-"));
    const harness = new SqliteHarnessStore(join(dir, "agent-sessions.db"));
    try {
      const spec = HarnessSessionSpec.parse({ agentRef: "a", runtimeRef: "r", idleTimeout: "5m" });
      const ready = async (name: string, lastActivity: string, over: object = {}) => {
        await harness.createHarnessSession({
          namespace: "default",
          name,
          uid: name,
          spec: HarnessSessionSpec.parse({ ...spec, ...over }),
          conditions: [],
        });
        await harness.setObserved("default", name, { phase: "Ready", last_activity_time: lastActivity });
      };
      await ready("old", "2026-01-01T00:04:00.000Z");
      await ready("fresh", "2026-01-01T00:09:00.000Z");
      await ready("never", "2026-01-01T00:00:00.000Z", { idleTimeout: "0" });
      await ready("long", "2026-01-01T00:00:00.000Z", { idleTimeout: "1h" });
      const stopped: [string, string][] = [];
      const idle = new IdleController({
        harness,
        controller: {
          idleStop: async (_ns, name, cutoff) => {
            stopped.push([name, cutoff]);
            return true;
          },
          pause: async () => false,
          resync: async () => undefined,
        },
        log: silentLogger,
        now: () => now,
      });
      await idle.tick();
      expect(stopped).toEqual([["old", "2026-01-01T00:05:00.000Z"]]);
    } finally {
      await harness.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe("IdleController over the SQLite store, paused tier", () => {
  it("pauses the Ready sessions idle for pauseAfter and stops the Paused ones idle for idleTimeout", async () => {
    const dir = mkdtempSync(join(tmpdir(), "idle-pause-"));
    const harness = new SqliteHarnessStore(join(dir, "agent-sessions.db"));
    try {
      const session = async (name: string, phase: "Ready" | "Paused", lastActivity: string, over: object) => {
        await harness.createHarnessSession({
          namespace: "default",
          name,
          uid: name,
          spec: HarnessSessionSpec.parse({ agentRef: "a", runtimeRef: "r", ...over }),
          conditions: [],
        });
        await harness.setObserved("default", name, { phase, last_activity_time: lastActivity });
      };
      await session("to-pause", "Ready", "2026-01-01T00:07:00.000Z", {
        idleTimeout: "15m",
        pauseAfter: "2m",
      });
      await session("busy-recently", "Ready", "2026-01-01T00:09:00.000Z", {
        idleTimeout: "15m",
        pauseAfter: "2m",
      });
      await session("paused-long", "Paused", "2026-01-01T00:00:00.000Z", {
        idleTimeout: "5m",
        pauseAfter: "1m",
      });
      await session("paused-recently", "Paused", "2026-01-01T00:07:00.000Z", {
        idleTimeout: "5m",
        pauseAfter: "1m",
      });
      await session("on-demand", "Ready", "2026-01-01T00:09:59.000Z", { desiredState: "paused" });
      const stopped: string[] = [];
      const paused: string[] = [];
      const idle = new IdleController({
        harness,
        controller: {
          idleStop: async (_ns, name) => {
            stopped.push(name);
            return true;
          },
          pause: async (_ns, name) => {
            paused.push(name);
            return true;
          },
          resync: async () => undefined,
        },
        log: silentLogger,
        now: () => now,
      });
      await idle.tick();
      expect(stopped).toEqual(["paused-long"]);
      expect(paused.sort()).toEqual(["on-demand", "to-pause"]);
    } finally {
      await harness.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
