import { CodedError } from "../../contracts/errors.ts";
import { type HarnessReason, HarnessReasons } from "../../contracts/harness-session.ts";
import { processLocks } from "../lifecycle/keyed-mutex.ts";
import { type AutoResumeStart, autoResumePlan, autoResumedCondition } from "./auto-resume-plan.ts";
import { observeSession, type Readiness, readyOf, withCondition, withReady } from "./harness-status.ts";
import {
  agentRefOf,
  errorBody,
  HarnessReconciler,
  type HarnessReconcilerOptions,
  type SnapshotEvent,
  harnessWorkstream,
} from "./harness-reconciler.ts";
import { HarnessWorkQueue, keyOf } from "./harness-work-queue.ts";
import type { HarnessRecord } from "../store/harness-store.ts";
import type { StoredFrame } from "../store/store.ts";
import type { RunnerSessionReport } from "../../contracts/runner-protocol.ts";

export type HarnessControllerOptions = HarnessReconcilerOptions;

/**
 * The HarnessSessions' controller: what the API, the idle controller and the relay ask of
 * sessions (reconcile, recover, idle stop, auto-resume, delete), each run as the session's one
 * task in the work queue (harness-work-queue.ts); what a reconcile does is the reconciler's
 * (harness-reconciler.ts).
 *
 * One reconcile per session at a time (in this process); reconciles are coalesced. A spec write
 * bumps the generation, and only a new generation retries a Failed session or resumes one
 * stopped for IdleTimeout: the controller never revives those behind the user's back. The one
 * exception is asked for in the spec: with spec.autoResume a request resumes a session stopped
 * for IdleTimeout (`autoResume`).
 */
export class HarnessController {
  readonly #o: HarnessControllerOptions;
  readonly #queue: HarnessWorkQueue;
  readonly #reconciler: HarnessReconciler;
  /** Requests waiting (in this process) for a session's auto-resume: no idle stop meanwhile. */
  readonly #awake = new Map<string, number>();

  constructor(options: HarnessControllerOptions) {
    this.#o = options;
    this.#queue = new HarnessWorkQueue(
      (namespace, name) => this.#reconciler.reconcile(namespace, name),
      options.log,
      (options.locks ?? processLocks)("harness"),
    );
    this.#reconciler = new HarnessReconciler(options, this.#queue);
    this.#reconciler.onEvict = (containerNames) => {
      for (const containerName of containerNames)
        this.evict(containerName).catch((error: unknown) =>
          options.log("error", "evicting a paused session failed", {
            container_name: containerName,
            error: String(error),
          }),
        );
    };
  }

  /**
   * Pause (the paused tier): a Ready session with nothing in flight and, with `cutoff`, no
   * activity after it, is frozen with all its memory (phase Paused). Never while requests wait
   * for it (holdAwake). True when it paused.
   */
  pause(namespace: string, name: string, opts: { cutoff?: string; why: string }): Promise<boolean> {
    return this.#queue.run(namespace, name, async () => {
      if (this.#awake.has(keyOf(namespace, name))) return false;
      const record = await this.#o.harness.getHarnessSession(namespace, name);
      if (record?.phase !== "Ready" || record.deletion_requested_at !== undefined) return false;
      if (record.spec.desiredState === "stopped") return false;
      return this.#reconciler.pause(record, opts);
    });
  }

  /**
   * Wake a Paused session (a request, an agent message, a files call): thawed and Ready at once.
   * A session that is not Paused is left as it is. Returns it as it is after.
   */
  wake(namespace: string, name: string, why: string): Promise<HarnessRecord | undefined> {
    return this.#queue.run(namespace, name, async () => {
      const record = await this.#o.harness.getHarnessSession(namespace, name);
      if (record?.phase !== "Paused" || record.deletion_requested_at !== undefined) return record;
      return this.#reconciler.wake(record, why);
    });
  }

  /**
   * The workspace `containerName` is about to be used (an agent message, a files call): when it is
   * a Paused HarnessSession's, wake it first, so its status says what it is.
   */
  async wakeWorkspace(containerName: string, why: string): Promise<void> {
    const owner = await this.#ownerOf(containerName);
    if (owner?.phase === "Paused") await this.wake(owner.namespace, owner.name, why);
  }

  /**
   * A runner attached and reported its sessions (PROTOCOL.md §3): each HarnessSession on a live
   * one follows whether the engine holds its workload frozen (`paused`; absent from an older
   * runner: left as it is). Never throws: failures are logged.
   */
  async followRunner(reported: RunnerSessionReport[]): Promise<void> {
    for (const report of reported) {
      const paused = report.paused;
      if (paused === undefined || (report.state !== "READY" && report.state !== "STARTING")) continue;
      try {
        const owner = await this.#ownerOf(report.container_name);
        if (!owner || (owner.phase === "Paused") === paused) continue;
        await this.#queue.run(owner.namespace, owner.name, async () => {
          const record = await this.#o.harness.getHarnessSession(owner.namespace, owner.name);
          if (!record || record.deletion_requested_at !== undefined) return;
          if (record.container_name !== report.container_name) return;
          const session = await this.#reconciler.session(record);
          if (session?.session_id !== report.session_id) return;
          await this.#reconciler.followWorkload(record, session, paused);
        });
      } catch (error) {
        this.#o.log("error", "following a runner's paused workloads failed", {
          container_name: report.container_name,
          error: String(error),
        });
      }
    }
  }

  /**
   * Evicted: a Paused session its runner's paused-memory budget wants gone is stopped (volume
   * kept), reason Evicted, said in its status and as an event. A session woken meanwhile is left
   * running: eviction never stops a running session.
   */
  async evict(containerName: string): Promise<boolean> {
    const owner = await this.#ownerOf(containerName);
    if (!owner) return false;
    return this.#queue.run(owner.namespace, owner.name, async () => {
      const record = await this.#o.harness.getHarnessSession(owner.namespace, owner.name);
      if (record?.phase !== "Paused" || record.container_name !== containerName) return false;
      this.#o.log("info", "harness session evicted (paused-memory budget)", {
        namespace: record.namespace,
        name: record.name,
        container_name: containerName,
      });
      await this.#reconciler.event(record, "Evicted", {
        message:
          "stopped while paused: its runner's paused sessions were over their memory budget and it was the least recently used",
      });
      const session = await this.#reconciler.session(record);
      await this.#reconciler.stop(record, session, HarnessReasons.Evicted, { settlesGeneration: false });
      return true;
    });
  }

  /** The HarnessSession whose workspace `containerName` is (its workstream names it), if any. */
  async #ownerOf(containerName: string): Promise<HarnessRecord | undefined> {
    const workspace = await this.#o.store.getWorkspace(containerName);
    if (!workspace?.workstream.startsWith("harness-")) return undefined;
    const namespace = workspace.agent_ref.split("/")[0] ?? "";
    const record = await this.#o.harness.getHarnessSession(
      namespace,
      workspace.workstream.slice("harness-".length),
    );
    if (record?.container_name === containerName) return record;
    // Not where its name says (never expected): look through the namespace's sessions.
    return (await this.#o.harness.listHarnessSessions(namespace)).find(
      (r) => r.container_name === containerName,
    );
  }

  /**
   * Runs `work` as the session's one task (a snapshot of it, issue 38): nothing reconciles, stops,
   * restores or deletes it meanwhile. `work` gets the session as it is then.
   */
  exclusive<T>(
    namespace: string,
    name: string,
    work: (record: HarnessRecord | undefined) => Promise<T>,
  ): Promise<T> {
    return this.#queue.run(namespace, name, async () =>
      work(await this.#o.harness.getHarnessSession(namespace, name)),
    );
  }

  /**
   * A snapshot's event, or its expiry's, on the session's event stream (a `log` frame); a failure
   * to record it is logged.
   */
  event(
    record: Pick<HarnessRecord, "namespace" | "name" | "session_id">,
    event: SnapshotEvent | "Expired" | "RequestFinished",
    payload: Record<string, unknown>,
    options?: { grouped?: boolean },
  ): Promise<void> {
    return this.#reconciler.event(record, event, payload, options);
  }

  /**
   * `:restore` (issue 38), as the session's one task: the session is stopped through the same
   * path as desiredState stopped (drain, agent session stopped, stack scaled to 0; reason
   * Restoring), `restoreVolume` replaces its volume's files, and it is brought back to its desired
   * state: running (or paused) resumes its agent session (`resume: true`, the conversation the
   * snapshot holds), stopped stays Stopped. A stop that fails, or `restoreVolume` throwing, leaves
   * the session Stopped and throws; its next spec write brings it back. Returns it as it is after.
   */
  restore(
    namespace: string,
    name: string,
    check: (record: HarnessRecord) => Promise<void>,
    restoreVolume: (record: HarnessRecord) => Promise<void>,
  ): Promise<HarnessRecord> {
    return this.#queue.run(namespace, name, async () => {
      const record = await this.#o.harness.getHarnessSession(namespace, name);
      if (!record || record.deletion_requested_at !== undefined)
        throw new CodedError(
          record ? "FAILED_PRECONDITION" : "NOT_FOUND",
          `HarnessSession ${namespace}/${name} ${record ? "is being deleted" : "not found"}`,
        );
      const t0 = performance.now();
      await check(record);
      const session = await this.#reconciler.session(record);
      const t1 = performance.now();
      await this.#reconciler.stop(record, session, HarnessReasons.Restoring, { settlesGeneration: false });
      const t2 = performance.now();
      const stopped = (await this.#o.harness.getHarnessSession(namespace, name)) ?? record;
      if (stopped.phase !== "Stopped")
        throw new CodedError(
          "UNAVAILABLE",
          `HarnessSession ${namespace}/${name} could not be stopped for the restore (${readyOf(stopped.conditions)?.message ?? stopped.phase}); nothing was restored`,
        );
      await restoreVolume(stopped);
      const t3 = performance.now();
      if (stopped.spec.desiredState === "stopped") {
        await this.#reconciler.observe(stopped, {
          conditions: withReady(
            stopped.conditions,
            {
              status: "False",
              reason: HarnessReasons.Stopped,
              message: "restored from a snapshot; stopped (desiredState: stopped)",
            },
            this.#reconciler.now(),
          ),
        });
      } else {
        await this.#reconciler.bringUp(stopped, await this.#reconciler.session(stopped));
        // desiredState paused: frozen again by the reconcile that follows.
        if (stopped.spec.desiredState === "paused") this.enqueue(namespace, name);
      }
      this.#o.log("debug", "restore timings", {
        namespace,
        name,
        check_ms: Math.round(t1 - t0),
        stop_ms: Math.round(t2 - t1),
        volume_ms: Math.round(t3 - t2),
        back_ms: Math.round(performance.now() - t3),
      });
      return (await this.#o.harness.getHarnessSession(namespace, name)) ?? stopped;
    });
  }

  /** Schedule a reconcile of one session (coalesced). Never throws: failures are logged. */
  enqueue(namespace: string, name: string): void {
    this.#queue.enqueue(namespace, name);
  }

  /** A status frame of an agent session: reconcile the HarnessSession it belongs to, if any. */
  onFrame(stored: StoredFrame): void {
    if (stored.frame.type !== "status") return;
    this.#o.harness.findHarnessSessionBySessionId(stored.frame.session_id).then(
      (record) => {
        if (record) this.enqueue(record.namespace, record.name);
      },
      (error: unknown) => this.#o.log("error", "harness lookup failed", { error: String(error) }),
    );
  }

  /** Reconcile every session (server start, periodic resync of unsettled ones with `unsettledOnly`). */
  async resync(unsettledOnly: boolean): Promise<void> {
    const records = unsettledOnly
      ? await this.#o.harness.listUnsettledHarnessSessions()
      : await this.#o.harness.listHarnessSessions();
    for (const r of records) {
      if (r.deletion_requested_at !== undefined) continue;
      const unsettled =
        r.phase === "Pending" || r.phase === "Draining" || r.observed_generation < r.generation;
      if (!unsettledOnly || unsettled) this.enqueue(r.namespace, r.name);
    }
  }

  /**
   * Server start, before the API listens: a session the store says is Ready was Ready for the
   * previous process. No runner link is up yet (every agent session is DISCONNECTED after
   * RunnerHub.recover), so no request could be relayed: it is mirrored from its agent session now
   * (Pending, RunnerDisconnected) and becomes Ready again only once it serves. Without this, a GET
   * would show Ready while every request fails.
   */
  async recover(): Promise<void> {
    for (const r of await this.#o.harness.listHarnessSessions()) {
      if (r.phase !== "Ready" || r.deletion_requested_at !== undefined) continue;
      await this.#queue.run(r.namespace, r.name, async () => {
        const record = await this.#o.harness.getHarnessSession(r.namespace, r.name);
        if (record?.phase !== "Ready") return;
        const session = await this.#reconciler.session(record);
        const observed = observeSession(session);
        if (observed?.phase === "Ready") return; // cannot be after recover(); left to the reconcile
        await this.#reconciler.observe(record, {
          phase: "Pending",
          conditions: withReady(
            record.conditions,
            observed?.ready ?? {
              status: "Unknown",
              reason: HarnessReasons.RunnerDisconnected,
              message: "the server restarted; waiting for the session's runner",
            },
            this.#reconciler.now(),
          ),
        });
      });
    }
  }

  /**
   * An Agent or AgentRuntime was created or changed: every session of its namespace that names it
   * and failed on its binding (Failed, reason Invalid: "Agent … not found", a runtime not approved…)
   * is brought up again, so a reference that becomes valid heals as Kubernetes users expect (a
   * manifest directory applied session first). Sessions failed for another reason stay settled.
   * Returns once each retry is queued; never throws (failures are logged).
   */
  async rebind(
    kind: "Agent" | "AgentRuntime" | "MCPServer" | "SkillPack",
    namespace: string,
    name: string,
  ): Promise<void> {
    const names = (record: HarnessRecord) =>
      // An MCPServer or a SkillPack is named by Agents, unknown here: every session failed on a
      // binding in the namespace is retried, as one of an unset runtimeRef (its Agent's) is.
      kind === "MCPServer" ||
      kind === "SkillPack" ||
      // An unset runtimeRef is its Agent's, unknown here: retried too (only binding failures are).
      (kind === "Agent" ? record.spec.agentRef : (record.spec.runtimeRef ?? name)) === name;
    let records: HarnessRecord[];
    try {
      records = await this.#o.harness.listHarnessSessions(namespace);
    } catch (error) {
      this.#o.log("error", "harness rebind lookup failed", { namespace, kind, name, error: String(error) });
      return;
    }
    for (const r of records) {
      if (!names(r) || !failedOnBinding(r)) continue;
      this.#queue
        .run(r.namespace, r.name, async () => {
          const record = await this.#o.harness.getHarnessSession(r.namespace, r.name);
          if (!record || !failedOnBinding(record)) return;
          await this.#reconciler.bringUp(record, await this.#reconciler.session(record));
        })
        .catch((error: unknown) =>
          this.#o.log("error", "harness session rebind failed", {
            namespace: r.namespace,
            name: r.name,
            error: String(error),
          }),
        );
    }
  }

  /** No more scheduled re-probes or restarts (server shutdown). */
  close(): void {
    this.#queue.close();
  }

  /**
   * Idle stop: only when the session is still Ready, nothing is in flight and the last activity is
   * at or before `cutoff` (checked atomically with request admission), then stop + scale down.
   * The spec is left as written: the session resumes when the spec is written again.
   */
  idleStop(namespace: string, name: string, cutoff: string): Promise<boolean> {
    return this.#queue.run(namespace, name, async () => {
      if (this.#awake.has(keyOf(namespace, name))) return false; // requests wait for it
      const record = await this.#o.harness.getHarnessSession(namespace, name);
      if (!record || record.deletion_requested_at !== undefined) return false;
      const draining = await this.#o.harness.beginDraining(namespace, name, {
        conditions: withReady(record.conditions, idleReadiness(record), this.#reconciler.now()),
        idle: { cutoff },
      });
      if (!draining) return false;
      this.#o.log("info", "harness session idle; stopping", {
        namespace,
        name,
        idleTimeout: record.spec.idleTimeout,
      });
      const session = await this.#reconciler.session(record);
      await this.#reconciler.stop(record, session, HarnessReasons.IdleTimeout, { settlesGeneration: false });
      return true;
    });
  }

  /**
   * Keeps the session from being stopped for idleness until the returned release is called
   * (requests waiting for its auto-resume hold it until they are admitted). In this process only.
   */
  holdAwake(namespace: string, name: string): () => void {
    const key = keyOf(namespace, name);
    this.#awake.set(key, (this.#awake.get(key) ?? 0) + 1);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const left = (this.#awake.get(key) ?? 1) - 1;
      if (left > 0) this.#awake.set(key, left);
      else this.#awake.delete(key);
    };
  }

  /**
   * Auto-resume (spec.autoResume) for request `requestId`: a session stopped for IdleTimeout (an
   * idle stop under way finishes first) is brought back up like a spec write would, with the
   * AutoResumed condition set. A session already on its way up is joined; anything else (stopped
   * by the user, Failed, being deleted, no autoResume) is refused and left alone. Returns once the
   * agent session is started, not Ready: the caller waits for Ready.
   */
  autoResume(namespace: string, name: string, requestId: string): Promise<AutoResumeStart> {
    return this.#queue.run(namespace, name, async () => {
      let record = await this.#o.harness.getHarnessSession(namespace, name);
      if (!record) return { action: "refuse", record: undefined };
      const plan = autoResumePlan(record);
      if (plan === "wake")
        return { action: plan, record: await this.#reconciler.wake(record, `request ${requestId}`) };
      if (plan !== "resume") return { action: plan, record };
      let session = await this.#reconciler.session(record);
      if (record.phase === "Draining") {
        // An idle stop that did not finish (e.g. a server restart): finish it, then resume.
        await this.#reconciler.stop(record, session, stoppedFor(record), { settlesGeneration: false });
        record = (await this.#o.harness.getHarnessSession(namespace, name)) ?? record;
        if (autoResumePlan(record) !== "resume" || record.phase !== "Stopped")
          return { action: autoResumePlan(record), record };
        session = await this.#reconciler.session(record);
      }
      this.#o.log("info", "harness session auto-resuming for a request", {
        namespace,
        name,
        request_id: requestId,
      });
      const marked = await this.#reconciler.observe(record, {
        conditions: withCondition(record.conditions, autoResumedCondition(requestId, this.#reconciler.now())),
      });
      await this.#reconciler.bringUp(marked, session, { autoResumeFor: requestId });
      return {
        action: "resume",
        record: (await this.#o.harness.getHarnessSession(namespace, name)) ?? marked,
      };
    });
  }

  /**
   * DELETE: drain, stop the agent session, destroy the stack (runner `remove`: container, network,
   * volume, stack), then forget the session. A failure keeps the record (deletionTimestamp set)
   * and is thrown; DELETE again retries.
   */
  delete(
    namespace: string,
    name: string,
    cause: { reason: HarnessReason; message: string } = {
      reason: HarnessReasons.Deleting,
      message: "deleting: tearing the workspace down",
    },
  ): Promise<void> {
    return this.#queue.run(namespace, name, async () => {
      const record = await this.#o.harness.getHarnessSession(namespace, name);
      if (!record) return;
      let current = await this.#reconciler.observe(record, {
        phase: "Draining",
        conditions: withReady(record.conditions, { status: "False", ...cause }, this.#reconciler.now()),
      });
      current = await this.#reconciler.waitDrained(current);
      const session = await this.#reconciler.session(current);
      if (session && session.state !== "STOPPED")
        await this.#o.sessions.stop({ session_id: session.session_id });
      const containerName =
        current.container_name ??
        (await this.#o.store.findWorkspace(agentRefOf(current), harnessWorkstream(current.name)))
          ?.container_name;
      if (containerName !== undefined) {
        try {
          await this.#o.workspaces.remove({ container_name: containerName });
        } catch (error) {
          const body = errorBody(error);
          await this.#reconciler.observe(current, {
            conditions: withReady(
              current.conditions,
              {
                status: "False",
                reason: HarnessReasons.Deleting,
                message: `deleting failed (${body.code}: ${body.message}); DELETE again to retry`,
              },
              this.#reconciler.now(),
            ),
          });
          throw error;
        }
      }
      await this.#o.harness.deleteHarnessSession(namespace, name);
      this.#o.log("info", "harness session deleted", { namespace, name, container_name: containerName });
    });
  }

  // ── reconcile ────────────────────────────────────────────────────────────────────────────
}

function idleReadiness(record: HarnessRecord): Readiness {
  return {
    status: "False",
    reason: HarnessReasons.IdleTimeout,
    message: `draining: no activity for ${record.spec.idleTimeout}`,
  };
}

/** Failed on its binding, wanting to run and not being deleted: what `rebind` retries. */
function failedOnBinding(record: HarnessRecord): boolean {
  return (
    record.phase === "Failed" &&
    readyOf(record.conditions)?.reason === HarnessReasons.Invalid &&
    record.spec.desiredState === "running" &&
    record.deletion_requested_at === undefined
  );
}

/** Why a session stopped (or stopping) for idleness was: IdleTimeout, or Evicted. */
export function stoppedFor(
  record: HarnessRecord,
): typeof HarnessReasons.IdleTimeout | typeof HarnessReasons.Evicted {
  return readyOf(record.conditions)?.reason === HarnessReasons.Evicted
    ? HarnessReasons.Evicted
    : HarnessReasons.IdleTimeout;
}
