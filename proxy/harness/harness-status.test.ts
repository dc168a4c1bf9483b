import { describe, expect, it } from "vitest";
import { type HarnessReason, HarnessReasons } from "../../contracts/harness-session.ts";
import {
  failureOf,
  observeSession,
  recoversByItself,
  restartsAfterExit,
  sessionFailureReason,
  toManifest,
  unreachable,
  withReady,
} from "./harness-status.ts";
import type { HarnessRecord } from "../store/harness-store.ts";

const T0 = "2026-01-01T00:00:00.000Z";
const T1 = "2026-01-01T00:01:00.000Z";

describe("HarnessSession status derivation", () => {
  it("moves the Ready condition's lastTransitionTime only when its status changes", () => {
    const pending = withReady([], { status: "False", reason: "Provisioning", message: "p" }, T0);
    const starting = withReady(pending, { status: "False", reason: "Starting", message: "s" }, T1);
    expect(starting).toEqual([
      { type: "Ready", status: "False", reason: "Starting", message: "s", lastTransitionTime: T0 },
    ]);
    const ready = withReady(starting, { status: "True", reason: "SessionReady", message: "r" }, T1);
    expect(ready[0]?.lastTransitionTime).toBe(T1);
    expect(ready).toHaveLength(1);
  });

  it.each([
    ["READY", "Ready", "True", HarnessReasons.SessionReady],
    ["STARTING", "Pending", "False", HarnessReasons.Starting],
    ["DISCONNECTED", "Pending", "Unknown", HarnessReasons.RunnerDisconnected],
    ["STOPPING", "Draining", "False", HarnessReasons.Stopped],
  ] as const)(
    "an agent session %s makes the session %s with Ready=%s (%s)",
    (state, phase, status, reason) => {
      expect(observeSession({ session_id: "ses-1", state })).toMatchObject({
        phase,
        ready: { status, reason },
      });
    },
  );

  it("a stopped agent session says nothing (the controller's record says why)", () => {
    expect(observeSession({ session_id: "ses-1", state: "STOPPED" })).toBeUndefined();
    expect(observeSession(undefined)).toBeUndefined();
  });

  it.each([
    ["ContainerExited", HarnessReasons.AdapterExited],
    ["OOMKilled", HarnessReasons.AdapterExited],
    ["ContainerRemoved", HarnessReasons.AdapterExited],
    ["EngineRestarted", HarnessReasons.AdapterExited],
    ["WorkspaceNotRunning", HarnessReasons.AdapterExited],
    ["AgentExited(3)", HarnessReasons.AgentExited],
    ["AgentNotReady", HarnessReasons.AgentExited],
    ["LostByRunner", HarnessReasons.RunnerLost],
    ["ReattachExpired", HarnessReasons.RunnerLost],
    ["StartFailed", HarnessReasons.StartFailed],
  ])("an ERRORED agent session with reason %s fails the session with %s", (reason, expected) => {
    expect(sessionFailureReason(reason)).toBe(expected);
    expect(observeSession({ session_id: "ses-1", state: "ERRORED", reason })).toMatchObject({
      phase: "Failed",
      ready: { status: "False", reason: expected },
    });
  });

  it("a READY agent session whose adapter a request cannot reach is not Ready: Pending, AdapterUnreachable, saying why", () => {
    expect(
      unreachable("ses-1", {
        code: "FAILED_PRECONDITION",
        message: "workspace w was not provisioned by this runner",
      }),
    ).toEqual({
      phase: "Pending",
      ready: {
        status: "False",
        reason: HarnessReasons.AdapterUnreachable,
        message:
          "agent session ses-1 is READY but a request cannot reach its adapter yet (FAILED_PRECONDITION: workspace w was not provisioned by this runner); retrying",
      },
    });
  });

  describe("which sessions the controller brings back up by itself", () => {
    const running: HarnessRecord["spec"] = {
      desiredState: "running",
      agentRef: "a",
      runtimeRef: "r",
      idleTimeout: "15m",
      autoResume: false,
    };
    const record = (
      phase: HarnessRecord["phase"],
      reason: HarnessReason = HarnessReasons.RunnerDisconnected,
      spec = running,
    ) => ({
      phase,
      spec,
      deletion_requested_at: undefined,
      conditions: withReady([], { status: "False", reason, message: "m" }, T0),
    });
    const errored = (reason: string) => ({ state: "ERRORED" as const, reason });

    it("one that should run whose workload stopped while the runner or the engine restarted", () => {
      expect(recoversByItself(record("Pending"), errored("WorkspaceNotRunning"))).toBe(true);
      expect(recoversByItself(record("Ready"), errored("EngineRestarted"))).toBe(true);
      // Already mirrored as Failed for that very error: still brought back.
      expect(
        recoversByItself(record("Failed", HarnessReasons.AdapterExited), errored("WorkspaceNotRunning")),
      ).toBe(true);
    });

    it("restarts (with a back-off) one that should run whose workload or agent crashed, was OOM-killed, removed or deleted", () => {
      for (const reason of [
        "ContainerExited",
        "OOMKilled",
        "ContainerRemoved",
        "PodDeleted",
        "AgentExited(1)",
      ]) {
        expect(restartsAfterExit(record("Ready"), errored(reason)), reason).toBe(true);
        expect(restartsAfterExit(record("Pending", HarnessReasons.Restarting), errored(reason)), reason).toBe(
          true,
        );
        // Mirrored as Failed while it was starting: still its own exit.
        expect(
          restartsAfterExit(record("Failed", HarnessReasons.AdapterExited), errored(reason)),
          reason,
        ).toBe(true);
      }
    });

    it("never restarts one that lost its runner, stopped underneath, should not run, or failed for another reason", () => {
      expect(restartsAfterExit(record("Ready"), errored("LostByRunner"))).toBe(false);
      expect(restartsAfterExit(record("Ready"), errored("ReattachExpired"))).toBe(false);
      expect(restartsAfterExit(record("Ready"), errored("WorkspaceNotRunning"))).toBe(false);
      expect(restartsAfterExit(record("Ready"), { state: "READY" })).toBe(false);
      const stopped: HarnessRecord["spec"] = { ...running, desiredState: "stopped" };
      expect(restartsAfterExit(record("Ready", undefined, stopped), errored("ContainerExited"))).toBe(false);
      expect(restartsAfterExit({ ...record("Ready"), deletion_requested_at: T1 }, errored("OOMKilled"))).toBe(
        false,
      );
      expect(restartsAfterExit(record("Draining"), errored("ContainerExited"))).toBe(false);
      expect(
        restartsAfterExit(record("Failed", HarnessReasons.StartFailed), errored("ContainerExited")),
      ).toBe(false);
    });

    it("never recovers (without a back-off) one that crashed, was OOM-killed or removed, or that lost its runner", () => {
      for (const reason of [
        "ContainerExited",
        "OOMKilled",
        "ContainerRemoved",
        "AgentExited(1)",
        "LostByRunner",
      ])
        expect(recoversByItself(record("Pending"), errored(reason)), reason).toBe(false);
      expect(recoversByItself(record("Pending"), { state: "READY" })).toBe(false);
    });

    it("never one that should not run, is stopping, stopped, being deleted, or whose bring-up failed for good", () => {
      const stopped: HarnessRecord["spec"] = { ...running, desiredState: "stopped" };
      expect(recoversByItself(record("Pending", undefined, stopped), errored("WorkspaceNotRunning"))).toBe(
        false,
      );
      expect(recoversByItself(record("Draining"), errored("WorkspaceNotRunning"))).toBe(false);
      expect(
        recoversByItself(record("Stopped", HarnessReasons.IdleTimeout), errored("WorkspaceNotRunning")),
      ).toBe(false);
      expect(
        recoversByItself({ ...record("Pending"), deletion_requested_at: T1 }, errored("WorkspaceNotRunning")),
      ).toBe(false);
      expect(
        recoversByItself(record("Failed", HarnessReasons.ProvisionFailed), errored("WorkspaceNotRunning")),
      ).toBe(false);
    });
  });

  it("retries transient failures (no runner, locked stack) and fails the rest with a reason", () => {
    expect(failureOf("provision", { code: "UNAVAILABLE", message: "no runner is connected" })).toEqual({
      reason: HarnessReasons.RunnerUnavailable,
      transient: true,
    });
    expect(failureOf("provision", { code: "ABORTED", message: "stack is locked" }).transient).toBe(true);
    expect(
      failureOf("provision", { code: "FAILED_PRECONDITION", message: "image pull failed: cannot pull x" }),
    ).toEqual({ reason: HarnessReasons.ImagePullFailed, transient: false });
    expect(failureOf("provision", { code: "INTERNAL", message: "up of stack x failed" })).toEqual({
      reason: HarnessReasons.ProvisionFailed,
      transient: false,
    });
    expect(failureOf("start", { code: "NOT_FOUND", message: "no container" })).toEqual({
      reason: HarnessReasons.StartFailed,
      transient: false,
    });
    expect(failureOf("stop", { code: "INTERNAL", message: "scale down failed" })).toEqual({
      reason: HarnessReasons.StopFailed,
      transient: true,
    });
  });

  it("renders a record as a manifest: usage counted honestly, unset fields left out", () => {
    const record: HarnessRecord = {
      namespace: "default",
      name: "chat",
      uid: "u-1",
      spec: {
        agentRef: "a",
        runtimeRef: "reference",
        desiredState: "running",
        idleTimeout: "15m",
        autoResume: false,
      },
      generation: 2,
      created_at: T0,
      updated_at: T1,
      deletion_requested_at: undefined,
      observed_generation: 2,
      phase: "Ready",
      conditions: [],
      container_name: "as-default-a",
      session_id: "ses-1",
      resolved_image_digest: "sha256:abc",
      last_activity_time: T1,
      request_count: 3,
      active_requests: 0,
      error_count: 1,
      last_request_id: "req-3",
      last_request_outcome: "succeeded",
      last_request_usage: "unavailable",
      input_tokens: 10,
      output_tokens: 4,
      usage_reported: 1,
      usage_unavailable: 2,
      gateway_input_tokens: 120,
      gateway_output_tokens: 30,
      gateway_reported: 3,
      gateway_unavailable: 1,
      restart_count: 2,
      consecutive_restarts: 1,
      restart_at: T1,
      last_exit: { reason: "OOMKilled", time: T1, session_id: "ses-1", seq: 7 },
    };
    const manifest = toManifest(record);
    expect(manifest.metadata).toEqual({
      name: "chat",
      namespace: "default",
      uid: "u-1",
      generation: 2,
      creationTimestamp: T0,
    });
    expect(manifest.status).toMatchObject({
      phase: "Ready",
      observedGeneration: 2,
      resolvedImageDigest: "sha256:abc",
      requestCount: 3,
      errorCount: 1,
      lastRequestUsage: "unavailable",
      restartCount: 2,
    });
    // usage is the gateway's count of model calls; the adapter's claim is claimedUsage.
    expect(manifest.status.usage).toEqual({
      inputTokens: 120,
      outputTokens: 30,
      reportedRequests: 3,
      unavailableRequests: 1,
      source: "gateway",
    });
    expect(manifest.status.claimedUsage).toEqual({
      inputTokens: 10,
      outputTokens: 4,
      reportedRequests: 1,
      unavailableRequests: 2,
    });
    // The exit as a user reads it; the controller's bookkeeping (session, seq) stays inside.
    expect(manifest.status.lastExit).toEqual({ reason: "OOMKilled", time: T1 });
    const bare = toManifest({
      ...record,
      session_id: undefined,
      last_request_usage: undefined,
      gateway_reported: 0,
      gateway_unavailable: 0,
      gateway_input_tokens: 0,
      gateway_output_tokens: 0,
    });
    // No gateway report counted yet: zeros, not claimed as the provider's.
    expect(bare.status.usage).toEqual({
      inputTokens: 0,
      outputTokens: 0,
      reportedRequests: 0,
      unavailableRequests: 0,
    });
    expect(bare.status).not.toHaveProperty("sessionId");
    expect(bare.status).not.toHaveProperty("lastRequestUsage");
  });
});
