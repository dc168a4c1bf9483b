import { describe, expect, it } from "vitest";
import { needsWorkloadCheck, restoreAction } from "./restore-plan.ts";

describe("what a restarted runner does with each saved session", () => {
  it("starts the agent again in a workload that still runs (same container, fresh agent)", () => {
    expect(restoreAction({ state: "READY" }, true)).toEqual({ kind: "restart-agent" });
    expect(restoreAction({ state: "STARTING" }, true)).toEqual({ kind: "restart-agent" });
  });

  it("reports a live session whose workload stopped while the runner was down ERRORED WorkspaceNotRunning", () => {
    expect(restoreAction({ state: "READY" }, false)).toEqual({
      kind: "keep-errored",
      reason: "WorkspaceNotRunning",
    });
    expect(restoreAction({ state: "STARTING" }, false)).toEqual({
      kind: "keep-errored",
      reason: "WorkspaceNotRunning",
    });
  });

  it("keeps an ERRORED session with the reason it had, whatever its workload does", () => {
    expect(restoreAction({ state: "ERRORED", reason: "OOMKilled" }, undefined)).toEqual({
      kind: "keep-errored",
      reason: "OOMKilled",
    });
    expect(restoreAction({ state: "ERRORED" }, true)).toEqual({ kind: "keep-errored", reason: undefined });
  });

  it("drops a session that was stopping (its agent went with the previous process) or settled", () => {
    expect(restoreAction({ state: "STOPPING" }, undefined)).toEqual({ kind: "drop" });
    expect(restoreAction({ state: "STOPPED" }, undefined)).toEqual({ kind: "drop" });
    expect(restoreAction({ state: "DISCONNECTED" }, undefined)).toEqual({ kind: "drop" });
  });

  it("asks the engine about the workload only for sessions that were live", () => {
    expect(
      ["STARTING", "READY", "STOPPING", "STOPPED", "ERRORED", "DISCONNECTED"].filter((state) =>
        needsWorkloadCheck({ state: state as "READY" }),
      ),
    ).toEqual(["STARTING", "READY"]);
  });
});
