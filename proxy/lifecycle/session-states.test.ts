import { describe, expect, it } from "vitest";
import { decideMissing, decideReported, isLive } from "./session-states.ts";

describe("what the store does with a runner's report (PROTOCOL.md §3)", () => {
  it("follows the runner for attached and disconnected sessions", () => {
    expect(decideReported({ state: "DISCONNECTED" }, "READY")).toEqual({
      kind: "set",
      state: "READY",
      reason: undefined,
    });
    expect(decideReported({ state: "READY" }, "ERRORED", "OOMKilled")).toEqual({
      kind: "set",
      state: "ERRORED",
      reason: "OOMKilled",
    });
    expect(decideReported({ state: "STARTING" }, "READY")).toMatchObject({ kind: "set", state: "READY" });
  });

  it("never turns a deliberate stop into ERRORED, and keeps the stop's reason", () => {
    expect(decideReported({ state: "STOPPING", reason: "Reload" }, "ERRORED", "AgentExited(143)")).toEqual({
      kind: "set",
      state: "STOPPED",
      reason: "Reload",
    });
    expect(decideReported({ state: "STOPPING" }, "READY")).toEqual({ kind: "keep" });
  });

  it("never revives a settled session: the runner is told to stop it instead", () => {
    expect(decideReported({ state: "ERRORED" }, "READY")).toEqual({ kind: "stop-on-runner" });
    expect(decideReported({ state: "STOPPED" }, "STARTING")).toEqual({ kind: "stop-on-runner" });
    expect(decideReported({ state: "ERRORED" }, "STOPPED")).toEqual({ kind: "keep" });
  });

  it("ignores DISCONNECTED from a runner (only the server knows the link is lost)", () => {
    expect(decideReported({ state: "READY" }, "DISCONNECTED")).toEqual({ kind: "keep" });
  });

  it("turns a live session missing from the set into ERRORED LostByRunner, a stopping one into STOPPED", () => {
    expect(decideMissing("DISCONNECTED")).toEqual({ kind: "set", state: "ERRORED", reason: "LostByRunner" });
    expect(decideMissing("READY")).toEqual({ kind: "set", state: "ERRORED", reason: "LostByRunner" });
    expect(decideMissing("STOPPING")).toEqual({ kind: "set", state: "STOPPED", reason: "Stopped" });
    expect(decideMissing("ERRORED")).toEqual({ kind: "keep" });
  });

  it("counts STARTING, READY, STOPPING and DISCONNECTED as live", () => {
    expect(["STARTING", "READY", "STOPPING", "DISCONNECTED"].every((s) => isLive(s as never))).toBe(true);
    expect(isLive("STOPPED") || isLive("ERRORED")).toBe(false);
  });
});
