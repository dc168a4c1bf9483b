import { type ApiErrorBody, CodedError, ErrorCode } from "../../contracts/errors.ts";
import { mcpGrantsOf } from "../lifecycle/mcp-servers.ts";
import { type KeyedLocks, processLocks } from "../lifecycle/keyed-mutex.ts";
import {
  type HarnessReason,
  HarnessReasons,
  PAUSED_TIER_PLACEMENT,
  wantsPausedTier,
} from "../../contracts/harness-session.ts";
import type { Agent, AgentRuntime } from "../../contracts/resources.ts";
import {
  failureMessage,
  failureOf,
  observeSession,
  type Readiness,
  readyOf,
  recoversByItself,
  restartsAfterExit,
  unreachable,
  withReady,
} from "./harness-status.ts";
import type { HarnessWorkQueue } from "./harness-work-queue.ts";
import { decideRestart, type RestartPolicy } from "./restart-policy.ts";
import type { Logger } from "../observability/log.ts";
import type { ProvisionRecorder } from "../lifecycle/provision-recorder.ts";
import type { RunnerDirectory } from "../lifecycle/runner-directory.ts";
import { type Admission, defaultAdmission } from "../lifecycle/admission.ts";
import {
  assertSessionRuntime,
  buildSessionSpec,
  resolveCredentials,
} from "../lifecycle/session-spec-builder.ts";
import { agentSkillPacks } from "../lifecycle/skill-packs.ts";
import { isLive } from "../lifecycle/session-states.ts";
import type { Sessions } from "../lifecycle/sessions.ts";
import type { HarnessRecord, HarnessStore, ObservedPatch } from "../store/harness-store.ts";
import type { SessionRecord, Store } from "../store/store.ts";
import type { Workspaces } from "../lifecycle/workspaces.ts";
import type { SessionJournal } from "../lifecycle/session-journal.ts";
import type { ForkSeed } from "../lifecycle/placement.ts";
import { SESSION_SNAPSHOT_KIND } from "../../contracts/session-snapshot.ts";
import { snapshotTarget } from "./snapshot-target.ts";

/** The workstream of a HarnessSession's workspace: one workspace per session. */
export function harnessWorkstream(name: string): string {
  return `harness-${name}`;
}

export type HarnessReconcilerOptions = {
  harness: HarnessStore;
  store: Store;
  /** Provisioning and removal over a directory that records resolved digests. */
  workspaces: Workspaces;
  digests: ProvisionRecorder;
  sessions: Sessions;
  runners: RunnerDirectory;
  log: Logger;
  /** The environment offered to sessions (offeredCredentialEnv), where Agent `secretRef` credentials are read (the binding check). @default none */
  secretEnv?: Record<string, string | undefined>;
  /** How long a stop waits for requests in flight to finish. @default 130000 */
  drainTimeoutMs?: number;
  /** How long the relay-path probe before Ready may take. @default 30000 */
  probeTimeoutMs?: number;
  /** How soon a session whose adapter a request could not reach is probed again. @default 1000 */
  probeRetryMs?: number;
  /** Restarts after unexpected exits, and when it is a CrashLoop (AGENT_SESSIONS_RESTART_*). */
  restartPolicy: RestartPolicy;
  /** What the operator admits (egress guard). @default defaultAdmission() */
  admission?: Admission;
  /** @default () => new Date() */
  now?: () => Date;
  /** One reconcile per session across server replicas too. @default processLocks (this process) */
  locks?: KeyedLocks;
  /** Where the paused tier's events (Paused, Woken, Evicted) go: `log` frames on the agent session's stream. */
  journal?: Pick<SessionJournal, "append">;
  /** How long a runner's `pause` or `unpause` may take. @default 30000 */
  pauseTimeoutMs?: number;
};

/**
 * A paused session's event on the event stream (a `log` frame with `event`). `PausedMemory`
 * follows `Paused` once the runner read what the frozen workload holds (an engine stats read the
 * pause does not wait for).
 */
export type PausedTierEvent =
  | "Paused"
  | "PausedMemory"
  | "Woken"
  | "Evicted"
  | SnapshotEvent
  | "Expired"
  /** Issue 42: every phase change, and every request's outcome, is an event on the session's stream. */
  | "PhaseChanged"
  | "RequestFinished";

/** A snapshot's event on the session it concerns (issue 38): taken of it, or restored into it. */
export type SnapshotEvent = "Snapshotted" | "Restored";

/**
 * Decides what a HarnessSession needs from its spec and its observed status, and does it:
 * desiredState running = workspace provisioned (stack up at scale 1) + agent session started;
 * stopped = agent session stopped + stack scaled to 0 (volume kept); delete = stack destroyed,
 * then forgotten. Keeps `status` true to what it observes (agent session states arrive as status
 * frames). Only a new generation retries a Failed session or resumes one stopped for
 * IdleTimeout: it never revives those behind the user's back.
 *
 * Every method expects to run as the session's one task (HarnessWorkQueue.run); reconciles it
 * wants again later (a restart's back-off, a re-probe) go back through the queue.
 */
export class HarnessReconciler {
  readonly #o: Required<Omit<HarnessReconcilerOptions, "secretEnv" | "locks" | "journal">> & {
    secretEnv: Record<string, string | undefined>;
    journal: HarnessReconcilerOptions["journal"];
  };
  readonly #queue: Pick<HarnessWorkQueue, "later">;
  /** Sessions whose runner refused to pause them, with the generation it refused (in this process). */
  readonly #pauseRefused = new Map<string, number>();
  /** Told which paused workloads a runner's budget wants stopped (the controller evicts them). */
  onEvict: (containerNames: string[]) => void = () => undefined;

  constructor(options: HarnessReconcilerOptions, queue: Pick<HarnessWorkQueue, "later">) {
    this.#o = {
      drainTimeoutMs: 130_000,
      probeTimeoutMs: 30_000,
      probeRetryMs: 1_000,
      pauseTimeoutMs: 30_000,
      now: () => new Date(),
      admission: defaultAdmission(),
      locks: processLocks,
      ...options,
      secretEnv: options.secretEnv ?? {},
      journal: options.journal,
    };
    this.#queue = queue;
  }

  /** One reconcile of a session: what its spec asks for, given what is observed. */
  async reconcile(namespace: string, name: string): Promise<void> {
    let record = await this.#o.harness.getHarnessSession(namespace, name);
    // A session being deleted is DELETE's business (and its retries').
    if (!record || record.deletion_requested_at !== undefined) return;
    const session = await this.session(record);
    if (record.spec.desiredState === "stopped") {
      await this.stop(record, session, HarnessReasons.Stopped, { settlesGeneration: true });
      return;
    }
    if (record.phase === "Paused" && session && isLive(session.state) && session.state !== "STOPPING") {
      // Frozen and alive: a spec write asking for running wakes it; otherwise it stays paused
      // (its agent session stays READY underneath: never mirrored to Ready while frozen).
      const written = record.observed_generation < record.generation;
      if (written && record.spec.desiredState === "running") await this.wake(record, "desiredState: running");
      else if (written) await this.observe(record, { observed_generation: record.generation });
      return;
    }
    if (session && recoversByItself(record, session)) {
      // The workload stopped underneath it while its runner or the engine restarted: it should run.
      await this.bringUp(record, session, { recovering: session.reason ?? "" });
      return;
    }
    const explicit = record.observed_generation < record.generation;
    if (!explicit && session && this.#o.restartPolicy.maxRestarts > 0 && restartsAfterExit(record, session)) {
      // The workload or the agent exited on its own: desiredState says running, so it runs again.
      await this.#afterExit(record, session);
      return;
    }
    if (explicit && record.consecutive_restarts > 0)
      // A spec write is a fresh start: earlier crashes no longer count toward a CrashLoop.
      record = await this.observe(record, { consecutive_restarts: 0 });
    if (session && isLive(session.state) && session.state !== "STOPPING") {
      await this.#mirror(record, session, explicit);
      await this.#pauseIfDesired(record);
      return;
    }
    if (!explicit) {
      // Settled until the spec is written again: a failure, or a stop for IdleTimeout.
      if (record.phase === "Failed" || record.phase === "Stopped") return;
      if (session?.state === "ERRORED") {
        await this.#mirror(record, session, false);
        return;
      }
      if (record.phase === "Draining") {
        // An idle stop (or an eviction) interrupted (server restart): finish it.
        const reason =
          readyOf(record.conditions)?.reason === HarnessReasons.Evicted
            ? HarnessReasons.Evicted
            : HarnessReasons.IdleTimeout;
        await this.stop(record, session, reason, { settlesGeneration: false });
        return;
      }
    }
    await this.bringUp(record, session);
    await this.#pauseIfDesired(record);
  }

  /** desiredState paused: a session that came Ready (and has nothing in flight) is frozen now. */
  async #pauseIfDesired(record: HarnessRecord): Promise<void> {
    if (record.spec.desiredState !== "paused") return;
    const current = await this.#o.harness.getHarnessSession(record.namespace, record.name);
    if (current?.phase === "Ready" && current.active_requests === 0 && current.uid === record.uid)
      await this.pause(current, { why: "desiredState: paused" });
  }

  /**
   * Freezes the session's workload (runner `pause`; nothing is recorded in its stack): Ready →
   * Paused, compare-and-set with request admission (nothing in flight, and with `cutoff` no
   * activity after it), so a request admitted meanwhile keeps it Ready. A runner that cannot (the
   * engine refused, the workload gone) leaves it Ready and says why in the log. Paused once the
   * workload is frozen; its memory is asked for after (`paused_memory`, off the session's queue, so
   * neither the pause nor a wake right after it waits for the engine's stats), and the paused
   * workloads the runner's memory budget then names are handed to `onEvict`. True when it paused.
   */
  async pause(record: HarnessRecord, opts: { cutoff?: string; why: string }): Promise<boolean> {
    const key = `${record.namespace}/${record.name}`;
    // Refused by its runner for this generation (e.g. placed on Kubernetes): not asked again
    // every sweep until the spec is written again.
    if (this.#pauseRefused.get(key) === record.generation) return false;
    const workspace =
      record.container_name !== undefined
        ? await this.#o.store.getWorkspace(record.container_name)
        : undefined;
    if (!workspace || record.session_id === undefined) return false;
    const began = Date.now();
    const paused = await this.#o.harness.beginDraining(record.namespace, record.name, {
      to: "Paused",
      conditions: withReady(
        record.conditions,
        {
          status: "False",
          reason: HarnessReasons.Paused,
          message: `paused (${opts.why}): the workload is frozen with all its memory; a request, an agent message or a files call wakes it`,
        },
        this.now(),
      ),
      idle: { cutoff: opts.cutoff ?? this.now() },
    });
    if (!paused) return false;
    const outcome = await this.#o.runners.command(
      workspace.runner_id,
      { kind: "pause", container_name: workspace.container_name },
      this.#o.pauseTimeoutMs,
    );
    if (!outcome.ok && outcome.error.code === "UNAVAILABLE") {
      // The link went with the command (or before it): the runner may have frozen the workload
      // and not said so. Paused until the runner attaches again and its hello says what the
      // engine holds (followWorkload): frozen, it stays Paused; running, it is Ready (and paused
      // again if desiredState says so). Shown Ready now, the reattach could take a frozen
      // workload for a running one and wake it.
      this.#o.log(
        "warn",
        "a pause's answer was lost with the runner's link; Paused until its runner reports",
        {
          namespace: record.namespace,
          name: record.name,
          message: outcome.error.message.slice(0, 500),
        },
      );
      return false;
    }
    if (!outcome.ok) {
      if (outcome.error.code === "FAILED_PRECONDITION") this.#pauseRefused.set(key, record.generation);
      this.#o.log("warn", "harness session could not be paused; it stays Ready", {
        namespace: record.namespace,
        name: record.name,
        code: outcome.error.code,
        message: outcome.error.message.slice(0, 500),
      });
      // The runner thaws before anything else it is asked, so Ready is true whatever it did.
      await this.observe(record, {
        phase: "Ready",
        conditions: withReady(
          record.conditions,
          {
            status: "True",
            reason: HarnessReasons.SessionReady,
            message: `agent session ${record.session_id} is READY`,
          },
          this.now(),
        ),
      });
      return false;
    }
    const settled = record.spec.desiredState === "paused" ? { observed_generation: record.generation } : {};
    if (Object.keys(settled).length > 0) await this.observe(record, settled);
    this.#o.log("info", "harness session paused", {
      namespace: record.namespace,
      name: record.name,
      why: opts.why,
      ms: Date.now() - began,
    });
    await this.event(record, "Paused", {
      why: opts.why,
      paused_in_ms: Date.now() - began,
      message: `paused (${opts.why}); its memory is kept`,
    });
    void this.#pausedMemory(record, workspace);
    return true;
  }

  /**
   * What the frozen workload holds (a `PausedMemory` event) and which paused workloads of its
   * runner are over the runner's budget (`onEvict`). Never throws: a failure is logged (the
   * budget is checked again at the runner's next pause).
   */
  async #pausedMemory(record: HarnessRecord, workspace: { runner_id: string; container_name: string }) {
    const outcome = await this.#o.runners.command(
      workspace.runner_id,
      { kind: "paused_memory", container_name: workspace.container_name },
      this.#o.pauseTimeoutMs,
    );
    if (!outcome.ok) {
      this.#o.log("warn", "reading a paused session's memory failed", {
        namespace: record.namespace,
        name: record.name,
        code: outcome.error.code,
        message: outcome.error.message.slice(0, 500),
      });
      return;
    }
    const bytes = outcome.result.memory_bytes;
    if (bytes !== undefined)
      await this.event(record, "PausedMemory", {
        memory_bytes: bytes,
        message: `paused with ${(bytes / 2 ** 20).toFixed(1)} MiB of memory kept`,
      });
    if (outcome.result.evict.length > 0) this.onEvict(outcome.result.evict);
  }

  /**
   * A runner attached and said whether the session's workload is frozen (its hello, PROTOCOL.md
   * §3): the phase follows the engine. Frozen and not Paused (a pause whose answer was lost with
   * the link): Paused. Not frozen while Paused (thawed outside, or by an older runner's restart):
   * Ready once the relay path answers, and paused again if desiredState says so.
   */
  async followWorkload(record: HarnessRecord, session: SessionRecord, paused: boolean): Promise<void> {
    if (paused && (record.phase === "Ready" || record.phase === "Pending")) {
      this.#o.log("info", "harness session found frozen by its runner; Paused", {
        namespace: record.namespace,
        name: record.name,
      });
      await this.observe(record, {
        phase: "Paused",
        conditions: withReady(
          record.conditions,
          {
            status: "False",
            reason: HarnessReasons.Paused,
            message:
              "paused (its runner reported the workload frozen): the workload is frozen with all its memory; a request, an agent message or a files call wakes it",
          },
          this.now(),
        ),
      });
      return;
    }
    if (!paused && record.phase === "Paused") {
      this.#o.log("info", "harness session's workload found running by its runner; no longer Paused", {
        namespace: record.namespace,
        name: record.name,
      });
      await this.#mirror({ ...record, phase: "Pending" }, session, false);
      await this.#pauseIfDesired(record);
    }
  }

  /**
   * Thaws a Paused session (runner `unpause`): Paused → Ready at once, its idle clock started
   * over. Throws the runner's error (the session stays Paused). Returns the session as it is now.
   */
  async wake(record: HarnessRecord, why: string): Promise<HarnessRecord> {
    const workspace =
      record.container_name !== undefined
        ? await this.#o.store.getWorkspace(record.container_name)
        : undefined;
    if (!workspace)
      throw new CodedError("FAILED_PRECONDITION", `${record.namespace}/${record.name} has no workspace`);
    const began = Date.now();
    const outcome = await this.#o.runners.command(
      workspace.runner_id,
      { kind: "unpause", container_name: workspace.container_name },
      this.#o.pauseTimeoutMs,
    );
    if (!outcome.ok) throw new CodedError(outcome.error.code, `waking failed: ${outcome.error.message}`);
    const woken = await this.observe(record, {
      phase: "Ready",
      observed_generation: record.generation,
      last_activity_time: this.now(),
      conditions: withReady(
        record.conditions,
        {
          status: "True",
          reason: HarnessReasons.SessionReady,
          message: `agent session ${record.session_id ?? ""} is READY (woken: ${why})`,
        },
        this.now(),
      ),
    });
    this.#o.log("info", "harness session woken", {
      namespace: record.namespace,
      name: record.name,
      why,
      ms: Date.now() - began,
    });
    await this.event(record, "Woken", { why, woken_in_ms: Date.now() - began, message: `woken (${why})` });
    return woken;
  }

  /**
   * One event of the paused tier on the session's event stream; a failure to record it is logged.
   * `grouped`: committed with this turn's other writes (a relayed request's RequestFinished).
   */
  async event(
    record: Pick<HarnessRecord, "namespace" | "name" | "session_id">,
    event: PausedTierEvent,
    payload: Record<string, unknown>,
    options?: { grouped?: boolean },
  ): Promise<void> {
    if (!this.#o.journal || record.session_id === undefined) return;
    await this.#o.journal
      .append(
        record.session_id,
        {
          type: "log",
          payload: { event, harness_session: { namespace: record.namespace, name: record.name }, ...payload },
        },
        options,
      )
      .catch((error: unknown) =>
        this.#o.log("warn", `${event} event not recorded`, {
          namespace: record.namespace,
          name: record.name,
          error: String(error),
        }),
      );
  }

  /**
   * Status follows a live (or errored) agent session. Ready only once a request could reach the
   * adapter: a READY agent session is Ready after the runner's probe of the relay path succeeded;
   * until then it is Pending, AdapterUnreachable, and probed again shortly.
   */
  async #mirror(record: HarnessRecord, session: SessionRecord, settlesGeneration: boolean): Promise<void> {
    let observed = observeSession(session);
    if (!observed) return;
    if (observed.phase === "Ready") {
      const probed = await this.#probe(session);
      if (!probed.ok) {
        if (
          record.phase === "Ready" ||
          readyOf(record.conditions)?.reason !== HarnessReasons.AdapterUnreachable
        )
          this.#o.log("warn", "harness session not serving: its adapter cannot be reached", {
            namespace: record.namespace,
            name: record.name,
            code: probed.error.code,
            message: probed.error.message,
          });
        observed = unreachable(session.session_id, probed.error);
        this.#queue.later("reprobe", record.namespace, record.name, this.#o.probeRetryMs);
      }
    }
    const becameReady = observed.phase === "Ready" && record.phase !== "Ready";
    await this.observe(record, {
      phase: observed.phase,
      conditions: withReady(record.conditions, observed.ready, this.now()),
      // Ready again: the idle clock starts over.
      ...(becameReady ? { last_activity_time: this.now() } : {}),
      ...(settlesGeneration ? { observed_generation: record.generation } : {}),
    });
  }

  /** Provision (stack up at scale 1) and start the agent session, resuming the previous one. */
  async bringUp(
    record: HarnessRecord,
    previous: SessionRecord | undefined,
    opts: { autoResumeFor?: string; recovering?: string; restarting?: string } = {},
  ): Promise<void> {
    const generation = record.generation;
    // The caller read the record before a DELETE may have marked it: nothing is provisioned for it.
    if (await this.#deleting(record)) return;
    const binding = await this.#checkBinding(record);
    if (!binding.ok) {
      this.#o.log("warn", "harness session binding invalid", {
        namespace: record.namespace,
        name: record.name,
        message: binding.message,
      });
      await this.observe(record, {
        observed_generation: generation,
        phase: "Failed",
        conditions: withReady(
          record.conditions,
          { status: "False", reason: HarnessReasons.Invalid, message: binding.message },
          this.now(),
        ),
      });
      return;
    }
    const resuming = previous !== undefined;
    const resumeReason =
      opts.restarting !== undefined
        ? HarnessReasons.Restarting
        : opts.recovering !== undefined
          ? HarnessReasons.Recovering
          : opts.autoResumeFor !== undefined
            ? HarnessReasons.AutoResuming
            : HarnessReasons.Resuming;
    const resumeWhy =
      opts.restarting !== undefined
        ? `restarting after ${opts.restarting} (restart ${record.restart_count})`
        : opts.recovering !== undefined
          ? `recovering: its workspace stopped while the runner or the engine restarted (${opts.recovering})`
          : opts.autoResumeFor !== undefined
            ? `auto-resuming for request ${opts.autoResumeFor}`
            : "resuming";
    let current = await this.observe(record, {
      phase: "Pending",
      conditions: withReady(
        record.conditions,
        resuming
          ? {
              status: "False",
              reason: resumeReason,
              message: `${resumeWhy}: bringing the stack up at scale 1`,
            }
          : { status: "False", reason: HarnessReasons.Provisioning, message: "provisioning the workspace" },
        this.now(),
      ),
    });

    let containerName: string;
    let seed: ForkSeed | undefined;
    try {
      seed = await this.#forkSeed(record);
      ({ container_name: containerName } = await this.#o.workspaces.provision(
        {
          agent_ref: agentRefOf(record),
          workstream: record.spec.workspace?.repo
            ? { name: harnessWorkstream(record.name), repo: record.spec.workspace.repo }
            : harnessWorkstream(record.name),
          client_request_id: "",
          ...(record.spec.runnerSelector ? { runner_selector: record.spec.runnerSelector } : {}),
        },
        {
          // A session in the paused tier goes only where it can be frozen (its write checked one can).
          ...(wantsPausedTier(record.spec) ? { engines: PAUSED_TIER_PLACEMENT } : {}),
          // A fork not seeded yet: on the runner holding its snapshot, seeded from it.
          ...(seed ? { seed } : {}),
          ...(record.spec.ports?.length ? { ports: record.spec.ports } : {}),
        },
      ));
    } catch (error) {
      await this.#failed(current, generation, "provision", errorBody(error));
      return;
    }
    const digest = this.#o.digests.takeResolvedDigest(containerName);
    // A DELETE marked while the provision ran (it waits for this task): start nothing in the
    // workspace, not even for a moment with the Agent's credentials; the delete removes it next.
    if (await this.#deleting(record)) {
      this.#o.log("info", "harness session deleted while provisioning; not started", {
        namespace: record.namespace,
        name: record.name,
        container_name: containerName,
      });
      return;
    }
    current = await this.observe(current, {
      container_name: containerName,
      ...(digest ? { resolved_image_digest: digest } : {}),
      conditions: withReady(
        current.conditions,
        {
          status: "False",
          reason: resuming ? resumeReason : HarnessReasons.Starting,
          message: resuming ? `${resumeWhy}: starting the agent session` : "starting the agent session",
        },
        this.now(),
      ),
    });

    const resumeId =
      previous && previous.container_name === containerName && !isLive(previous.state)
        ? previous.session_id
        : undefined;
    let sessionId: string;
    try {
      ({ session_id: sessionId } = await this.#o.sessions.start(
        {
          container_name: containerName,
          ...(resumeId !== undefined ? { resume_session_id: resumeId } : {}),
        },
        // A fork's agent resumes the conversation its snapshot holds from its first start.
        record.spec.source !== undefined ? { resume: true } : {},
      ));
    } catch (error) {
      const body = errorBody(error);
      const live = body.code === "ALREADY_EXISTS" ? body.details?.session_id : undefined;
      if (typeof live !== "string") {
        await this.#failed(current, generation, "start", body);
        return;
      }
      sessionId = live; // a session already runs in the workspace (e.g. started before a crash): adopt it
    }
    current = await this.observe(current, { session_id: sessionId });
    const session = await this.#o.store.getSession(sessionId);
    if (session) await this.#mirror(current, session, true);
  }

  /**
   * An unexpected exit of the workload or the agent (ERRORED, desiredState running). A new exit
   * (one status frame: agent session + seq) is counted and either scheduled for a restart after
   * its back-off (Pending, Restarting) or, after too many in a row, settled as Failed/CrashLoop.
   * The exit already handled restarts once its back-off is over (resuming the agent session: the
   * conversation is on the volume).
   */
  async #afterExit(record: HarnessRecord, session: SessionRecord): Promise<void> {
    const handled =
      record.last_exit?.session_id === session.session_id && record.last_exit.seq === session.last_seq;
    const reason = session.reason ?? "unknown";
    if (!handled) {
      const now = this.#o.now();
      const exit = { reason, time: now.toISOString(), session_id: session.session_id, seq: session.last_seq };
      const decision = decideRestart(
        this.#o.restartPolicy,
        { consecutive: record.consecutive_restarts, lastRestartAt: record.restart_at },
        now,
      );
      if (decision.action === "crashLoop") {
        this.#o.log("warn", "harness session crash-looping: not restarted again", {
          namespace: record.namespace,
          name: record.name,
          reason,
          restarts: decision.consecutive,
        });
        await this.observe(record, {
          last_exit: exit,
          observed_generation: record.generation,
          phase: "Failed",
          conditions: withReady(
            record.conditions,
            {
              status: "False",
              reason: HarnessReasons.CrashLoop,
              message: `agent session ${session.session_id} exited unexpectedly (${reason}) again after ${decision.consecutive} restarts in a row; write the spec again (e.g. desiredState: running) to retry`,
            },
            now.toISOString(),
          ),
        });
        return;
      }
      this.#o.log("info", "harness session exited unexpectedly: restarting", {
        namespace: record.namespace,
        name: record.name,
        reason,
        restart: record.restart_count + 1,
        delay_ms: decision.delayMs,
      });
      await this.observe(record, {
        last_exit: exit,
        restart_count: record.restart_count + 1,
        consecutive_restarts: decision.consecutive,
        restart_at: decision.restartAt,
        phase: "Pending",
        conditions: withReady(
          record.conditions,
          {
            status: "False",
            reason: HarnessReasons.Restarting,
            message: `agent session ${session.session_id} exited unexpectedly (${reason}); restart ${record.restart_count + 1} in ${decision.delayMs} ms`,
          },
          now.toISOString(),
        ),
      });
      this.#queue.later("restart", record.namespace, record.name, decision.delayMs);
      return;
    }
    if (readyOf(record.conditions)?.reason === HarnessReasons.CrashLoop) return;
    const wait =
      record.restart_at === undefined ? 0 : Date.parse(record.restart_at) - this.#o.now().getTime();
    if (wait > 0) {
      this.#queue.later("restart", record.namespace, record.name, wait); // e.g. after a server restart
      return;
    }
    await this.bringUp(record, session, { restarting: reason });
  }

  /**
   * A fork (spec.source.snapshotRef) whose workspace was not seeded yet: its snapshot's storage and
   * the runner holding it. Undefined for a session that is no fork or whose workspace holds the
   * seed already (`seeded_snapshot`). A snapshot gone (or not Ready) before the seed was copied
   * fails the provision with FAILED_PRECONDITION naming it.
   */
  async #forkSeed(record: HarnessRecord): Promise<ForkSeed | undefined> {
    const ref = record.spec.source?.snapshotRef;
    if (ref === undefined) return undefined;
    const workspace =
      record.container_name !== undefined
        ? await this.#o.store.getWorkspace(record.container_name)
        : await this.#o.store.findWorkspace(agentRefOf(record), harnessWorkstream(record.name));
    if (workspace?.seeded_snapshot !== undefined) return undefined;
    const snapshot = await this.#o.store.getResource(SESSION_SNAPSHOT_KIND, record.namespace, ref);
    const runner = snapshot?.status.runner;
    if (snapshot?.status.phase !== "Ready" || runner === undefined)
      throw new CodedError(
        "FAILED_PRECONDITION",
        `spec.source.snapshotRef: ${SESSION_SNAPSHOT_KIND} ${record.namespace}/${ref} ${snapshot ? "is not Ready" : "no longer exists"}, and this fork's workspace was not seeded from it yet`,
      );
    const holder = await this.#o.store.findRunner(runner);
    return {
      runnerId: holder?.runner_id ?? runner,
      runnerName: runner,
      storage: snapshotTarget(snapshot, workspace?.spec),
    };
  }

  /** Asks the session's runner whether a request could reach the adapter now (PROTOCOL.md §7 `probe`). */
  async #probe(session: SessionRecord): Promise<{ ok: true } | { ok: false; error: ApiErrorBody }> {
    const workspace = await this.#o.store.getWorkspace(session.container_name);
    if (!workspace)
      return {
        ok: false,
        error: { code: "FAILED_PRECONDITION", message: `workspace ${session.container_name} is not known` },
      };
    const outcome = await this.#o.runners.command(
      workspace.runner_id,
      {
        kind: "probe",
        container_name: workspace.container_name,
        ...(workspace.spec.session ? { protocol: workspace.spec.session.protocol } : {}),
      },
      this.#o.probeTimeoutMs,
    );
    return outcome.ok ? { ok: true } : { ok: false, error: outcome.error };
  }

  /** Drain, stop the agent session, scale the stack to 0 (volume kept); phase Stopped with `reason`. */
  async stop(
    record: HarnessRecord,
    session: SessionRecord | undefined,
    reason: HarnessReason,
    opts: { settlesGeneration: boolean },
  ): Promise<void> {
    const settle: ObservedPatch = opts.settlesGeneration ? { observed_generation: record.generation } : {};
    const stopped: Readiness = {
      status: "False",
      reason,
      message:
        reason === HarnessReasons.IdleTimeout || reason === HarnessReasons.Evicted
          ? `${
              reason === HarnessReasons.Evicted
                ? "evicted: stopped while paused, the least recently used over its runner's paused-memory budget (AGENT_SESSIONS_RUNNER_PAUSED_MEMORY_MAX_BYTES)"
                : `stopped after ${record.spec.idleTimeout} without activity`
            }; the volume is kept. ${
              record.spec.autoResume === true
                ? "The next request resumes it (spec.autoResume)"
                : "Write the spec (e.g. desiredState: running) to resume"
            }`
          : reason === HarnessReasons.Restoring
            ? "stopped to restore its volume from a snapshot; it is brought back to its desired state next"
            : "stopped (desiredState: stopped); the volume is kept",
    };
    const running = session !== undefined && session.state !== "STOPPED";
    if (record.phase === "Stopped" && !running) {
      const ready = record.conditions.find((c) => c.type === "Ready");
      if (ready?.reason !== reason || opts.settlesGeneration)
        await this.observe(record, {
          ...settle,
          conditions: withReady(record.conditions, stopped, this.now()),
        });
      return;
    }
    let current = await this.observe(record, {
      phase: "Draining",
      conditions: withReady(
        record.conditions,
        { ...stopped, message: `draining: ${stopped.message}` },
        this.now(),
      ),
    });
    current = await this.waitDrained(current);
    try {
      if (running) await this.#o.sessions.stop({ session_id: session.session_id });
      const workspace =
        current.container_name !== undefined
          ? await this.#o.store.getWorkspace(current.container_name)
          : undefined;
      if (workspace) {
        const outcome = await this.#o.runners.command(workspace.runner_id, {
          kind: "scale_down",
          container_name: workspace.container_name,
        });
        if (!outcome.ok)
          throw new CodedError(outcome.error.code, `scaling down failed: ${outcome.error.message}`);
      }
    } catch (error) {
      // Stays Draining: the periodic resync tries again.
      await this.#failed(current, record.generation, "stop", errorBody(error));
      return;
    }
    await this.observe(current, {
      ...settle,
      phase: "Stopped",
      conditions: withReady(current.conditions, stopped, this.now()),
    });
    this.#o.log("info", "harness session stopped", {
      namespace: record.namespace,
      name: record.name,
      reason,
    });
  }

  /** Whether the session is gone or a DELETE is marked on it (read again from the store). */
  async #deleting(record: HarnessRecord): Promise<boolean> {
    const now = await this.#o.harness.getHarnessSession(record.namespace, record.name);
    return !now || now.uid !== record.uid || now.deletion_requested_at !== undefined;
  }

  async #failed(
    record: HarnessRecord,
    generation: number,
    step: "provision" | "start" | "stop",
    error: ApiErrorBody,
  ): Promise<void> {
    const { reason, transient } = failureOf(step, error);
    const message = failureMessage(step, error, transient);
    this.#o.log("warn", "harness session step failed", {
      namespace: record.namespace,
      name: record.name,
      step,
      code: error.code,
      reason,
      // As the Ready condition says it (status is secret-free): the log alone must tell why.
      message: error.message.slice(0, 500),
    });
    const ready: Readiness = { status: "False", reason, message };
    await this.observe(
      record,
      transient
        ? {
            phase: step === "stop" ? "Draining" : "Pending",
            conditions: withReady(record.conditions, ready, this.now()),
          }
        : {
            observed_generation: generation,
            phase: "Failed",
            conditions: withReady(record.conditions, ready, this.now()),
          },
    );
  }

  /**
   * The binding a session needs before anything is provisioned: the Agent in the session's
   * namespace, bound to the named runtime, which is approved and declares v1alpha2, and a session
   * spec and credentials that resolve.
   */
  async #checkBinding(record: HarnessRecord): Promise<{ ok: true } | { ok: false; message: string }> {
    const { namespace, spec } = record;
    const agent = (await this.#o.store.getResource("Agent", namespace, spec.agentRef)) as Agent | undefined;
    if (!agent) return { ok: false, message: `Agent ${namespace}/${spec.agentRef} not found` };
    if (spec.runtimeRef !== undefined && agent.spec.runtimeRef !== spec.runtimeRef)
      return {
        ok: false,
        message: `runtimeRef ${spec.runtimeRef} does not match Agent ${namespace}/${spec.agentRef}'s runtime ${agent.spec.runtimeRef}`,
      };
    // Unset (applied before its Agent, issue 34 item 4): the Agent's, now that it exists.
    const runtimeRef = spec.runtimeRef ?? agent.spec.runtimeRef;
    const runtime = (await this.#o.store.getResource("AgentRuntime", namespace, runtimeRef)) as
      | AgentRuntime
      | undefined;
    if (!runtime) return { ok: false, message: `AgentRuntime ${namespace}/${runtimeRef} not found` };
    try {
      assertSessionRuntime(runtime, this.#o.admission);
      buildSessionSpec({
        namespace,
        name: record.name,
        engine: "docker",
        agent,
        runtime,
        skillPacks: await agentSkillPacks(this.#o.store, agent),
        admission: this.#o.admission,
      });
      resolveCredentials(agent, this.#o.secretEnv);
      await mcpGrantsOf(this.#o.store, agent, runtime, this.#o.admission, this.#o.secretEnv);
    } catch (error) {
      return { ok: false, message: errorBody(error).message };
    }
    return { ok: true };
  }

  /** Waits (bounded) until no request is in flight; returns the latest record. */
  async waitDrained(record: HarnessRecord): Promise<HarnessRecord> {
    const deadline = Date.now() + this.#o.drainTimeoutMs;
    let current = record;
    while (current.active_requests > 0 && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 100));
      current = (await this.#o.harness.getHarnessSession(record.namespace, record.name)) ?? current;
    }
    return current;
  }

  async session(record: HarnessRecord): Promise<SessionRecord | undefined> {
    return record.session_id === undefined ? undefined : this.#o.store.getSession(record.session_id);
  }

  async observe(record: HarnessRecord, patch: ObservedPatch): Promise<HarnessRecord> {
    const observed = (await this.#o.harness.setObserved(record.namespace, record.name, patch)) ?? record;
    if (patch.phase === undefined || patch.phase === record.phase || !this.#o.journal) return observed;
    if (observed.session_id === undefined) return observed;
    const ready = observed.conditions.find((c) => c.type === "Ready");
    const stored = await this.#o.journal
      .append(observed.session_id, {
        type: "log",
        payload: {
          event: "PhaseChanged" satisfies PausedTierEvent,
          harness_session: { namespace: observed.namespace, name: observed.name },
          from: record.phase,
          phase: observed.phase,
          ...(ready ? { reason: ready.reason, message: ready.message } : {}),
        },
      })
      .catch(() => undefined);
    // An exit is known as handled by the session's last seq when it was recorded: this event
    // moved it on, so the record follows (else the same exit would be handled again).
    const exit = observed.last_exit;
    if (stored && exit?.session_id === stored.frame.session_id && exit.seq === stored.frame.seq - 1)
      return (
        (await this.#o.harness.setObserved(observed.namespace, observed.name, {
          last_exit: { ...exit, seq: stored.frame.seq },
        })) ?? observed
      );
    return observed;
  }

  now(): string {
    return this.#o.now().toISOString();
  }
}

export function agentRefOf(record: HarnessRecord): string {
  return `${record.namespace}/${record.spec.agentRef}`;
}

/** Any thrown value as `{code, message, details?}`; uncoded errors are INTERNAL. */
export function errorBody(error: unknown): ApiErrorBody {
  const e = error as { code?: unknown; message?: unknown; details?: unknown } | null;
  const code = ErrorCode.safeParse(e?.code);
  const body: ApiErrorBody = {
    code: code.success ? code.data : "INTERNAL",
    message: String(e?.message ?? error),
  };
  if (e?.details && typeof e.details === "object") body.details = e.details as Record<string, unknown>;
  return body;
}
