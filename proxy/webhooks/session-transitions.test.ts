import { describe, expect, it } from "vitest";
import type { Condition } from "../../contracts/harness-session.ts";
import { transitionEvents } from "./session-transitions.ts";

const ready = (reason: string): Condition[] => [
  { type: "Ready", status: "False", reason, message: reason, lastTransitionTime: "2026-12-06T00:00:00Z" },
];
const s = (
  phase: "Pending" | "Ready" | "Paused" | "Draining" | "Stopped" | "Failed",
  reason = "x",
  restarts = 0,
) => ({
  phase,
  conditions: ready(reason),
  restart_count: restarts,
});

describe("session transitions → webhook events", () => {
  it("maps the phases a session enters to events, and the steps on the way to none", () => {
    expect(transitionEvents(s("Pending"), s("Ready", "SessionReady"))).toEqual(["ready"]);
    expect(transitionEvents(s("Ready"), s("Paused", "Paused"))).toEqual(["paused"]);
    expect(transitionEvents(s("Draining"), s("Stopped", "Stopped"))).toEqual(["stopped"]);
    expect(transitionEvents(s("Draining"), s("Stopped", "IdleTimeout"))).toEqual(["stopped"]);
    expect(transitionEvents(s("Paused"), s("Stopped", "Evicted"))).toEqual(["evicted"]);
    expect(transitionEvents(s("Pending"), s("Failed", "ImagePullFailed"))).toEqual(["failed"]);
    expect(transitionEvents(s("Ready"), s("Draining", "Stopped"))).toEqual([]);
    expect(transitionEvents(s("Pending", "Provisioning"), s("Pending", "Starting"))).toEqual([]);
    expect(transitionEvents(s("Ready", "SessionReady"), s("Ready", "SessionReady"))).toEqual([]);
  });

  it("says restarted when the restart count goes up, and expired when the reason turns Expired", () => {
    expect(transitionEvents(s("Ready", "SessionReady", 0), s("Pending", "Restarting", 1))).toEqual([
      "restarted",
    ]);
    expect(transitionEvents(s("Ready", "SessionReady"), s("Draining", "Expired"))).toEqual(["expired"]);
    expect(transitionEvents(s("Draining", "Expired"), s("Draining", "Expired"))).toEqual([]);
  });
});
