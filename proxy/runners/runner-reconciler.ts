import type { RunnerSessionReport, RunnerToServer } from "../../contracts/runner-protocol.ts";
import { SessionReasons } from "../../contracts/session-reasons.ts";
import type { KeyedLock } from "../lifecycle/keyed-mutex.ts";
import type { Logger } from "../observability/log.ts";
import type { SessionJournal } from "../lifecycle/session-journal.ts";
import {
  ATTACHED_STATES,
  type Decision,
  decideMissing,
  decideReported,
} from "../lifecycle/session-states.ts";
import type { SessionRecord, Store } from "../store/store.ts";

export type RunnerReconcilerOptions = {
  store: Store;
  journal: SessionJournal;
  reattachWindowMs: number;
  /** Attach, detach and expiry of one runner never interleave (the hub's lock, by runner id). */
  runnerMutex: KeyedLock;
  /** Whether a runner has a link now (a reattach window does not expire under one). */
  hasLink: (runnerId: string) => boolean;
  /** Stop a settled session that still runs on its runner (a command over its link). */
  stopOnRunner: (runnerId: string, sessionId: string) => void;
  log: Logger;
};

/**
 * The store's agent sessions kept true to what their runners say (PROTOCOL.md §3, §5): the
 * runner's authoritative set on attach, its session states and frames while attached, its
 * sessions DISCONNECTED when its link is lost, and ERRORED when its reattach window closes
 * without a reattach. The link itself (sockets, hello, heartbeats, commands) is the hub's.
 */
export class RunnerReconciler {
  readonly #o: RunnerReconcilerOptions;
  /** Reattach windows running, by runner id. */
  readonly #expiries = new Map<string, NodeJS.Timeout>();
  /** Runners the last sweep found linked nowhere. */
  #unlinkedBefore = new Set<string>();
  #closing = false;

  constructor(options: RunnerReconcilerOptions) {
    this.#o = options;
  }

  /**
   * After a server (re)start no runner is attached yet: sessions the store still holds as
   * attached become DISCONNECTED and their runners' reattach windows start (PROTOCOL.md §5).
   */
  async recover(): Promise<void> {
    const stranded = await this.#o.store.listSessions({ states: [...ATTACHED_STATES, "DISCONNECTED"] });
    const runners = new Set<string>();
    for (const session of stranded) {
      if (this.#o.hasLink(session.runner_id)) continue;
      runners.add(session.runner_id);
      await this.#o.journal.transition(session.session_id, {
        state: "DISCONNECTED",
        reason: SessionReasons.RunnerDisconnected,
        from: ATTACHED_STATES,
      });
    }
    for (const runnerId of runners) this.armExpiry(runnerId);
  }

  /**
   * The lease holder's sweep when replicas share the store (replica-cluster.ts): sessions of a
   * runner attached nowhere — its replica died with its link — become DISCONNECTED and the
   * runner's reattach window starts here (PROTOCOL.md §5), as after a restart. A runner must be
   * seen linked nowhere by two sweeps in a row: a link being attached on another replica while
   * one sweep reads is not taken for a lost one.
   */
  async sweep(): Promise<void> {
    const stranded = await this.#o.store.listSessions({ states: [...ATTACHED_STATES, "DISCONNECTED"] });
    const unlinked = new Set<string>();
    for (const session of stranded) {
      if (this.#o.hasLink(session.runner_id)) continue;
      unlinked.add(session.runner_id);
      if (!this.#unlinkedBefore.has(session.runner_id)) continue;
      await this.#o.journal.transition(session.session_id, {
        state: "DISCONNECTED",
        reason: SessionReasons.RunnerDisconnected,
        from: ATTACHED_STATES,
      });
      if (!this.#expiries.has(session.runner_id)) this.armExpiry(session.runner_id);
    }
    this.#unlinkedBefore = unlinked;
  }

  /** No more reattach windows (server shutdown). */
  close(): void {
    this.#closing = true;
    for (const timer of this.#expiries.values()) clearTimeout(timer);
    this.#expiries.clear();
  }

  /**
   * PROTOCOL.md §3: the store follows the runner's authoritative set. Returns the sessions to stop
   * there, and the workspaces to remove there: those of reported sessions the store holds neither
   * the session nor the workspace of (issue 34 item 11c: what a restarted runner finds of its own
   * that the server no longer wants is removed, not left running with its credentials).
   */
  async reconcile(
    runnerId: string,
    reported: RunnerSessionReport[],
  ): Promise<{ toStop: string[]; toRemove: string[] }> {
    const toStop: string[] = [];
    const toRemove = new Set<string>();
    const remaining = new Map(reported.map((r) => [r.session_id, r]));
    for (const session of await this.#o.store.listSessions({ runnerId })) {
      const report = remaining.get(session.session_id);
      remaining.delete(session.session_id);
      const decision = report
        ? decideReported(session, report.state, report.reason)
        : decideMissing(session.state);
      if (await this.#apply(session, decision)) toStop.push(session.session_id);
    }
    for (const report of remaining.values()) {
      // Known to the runner, not to the store under it: adopt it when its workspace is ours there.
      const workspace = await this.#o.store.getWorkspace(report.container_name);
      const existing = await this.#o.store.getSession(report.session_id);
      if (!workspace && !existing) {
        // The runner's own (it reported it), the server's no more: the workspace was removed, or
        // never recorded. Another runner's workspace (below) is never touched from here.
        this.#o.log(
          "warn",
          "runner reported a session of a workspace the server no longer holds; removing it",
          {
            runner_id: runnerId,
            session_id: report.session_id,
            container_name: report.container_name,
          },
        );
        toRemove.add(report.container_name);
        continue;
      }
      if (!workspace || workspace.runner_id !== runnerId || existing) {
        this.#o.log("warn", "runner reported a session the server does not place on it; left alone", {
          runner_id: runnerId,
          session_id: report.session_id,
          container_name: report.container_name,
        });
        continue;
      }
      await this.#o.store.insertSession({
        session_id: report.session_id,
        container_name: report.container_name,
        agent_ref: workspace.agent_ref,
        runner_id: runnerId,
        state: "STARTING",
      });
      await this.#o.journal.transition(report.session_id, { state: report.state });
    }
    return { toStop, toRemove: [...toRemove] };
  }

  /** A runner's link was lost: its attached sessions become DISCONNECTED. */
  async disconnect(runnerId: string): Promise<void> {
    for (const session of await this.#o.store.listSessions({ runnerId, states: ATTACHED_STATES }))
      await this.#o.journal.transition(session.session_id, {
        state: "DISCONNECTED",
        reason: SessionReasons.RunnerDisconnected,
        from: ATTACHED_STATES,
      });
  }

  /** Start (or restart) a runner's reattach window. */
  armExpiry(runnerId: string): void {
    if (this.#closing) return;
    const existing = this.#expiries.get(runnerId);
    if (existing) clearTimeout(existing);
    const timer = setTimeout(() => {
      this.#expiries.delete(runnerId);
      this.#o.runnerMutex
        .run(runnerId, () => this.#expire(runnerId))
        .catch((error: unknown) =>
          this.#o.log("error", "reattach expiry failed", { runner_id: runnerId, error: String(error) }),
        );
    }, this.#o.reattachWindowMs);
    this.#expiries.set(runnerId, timer);
  }

  /** The runner reattached: its window stops. */
  cancelExpiry(runnerId: string): void {
    const expiry = this.#expiries.get(runnerId);
    if (expiry) clearTimeout(expiry);
    this.#expiries.delete(runnerId);
  }

  /** Frames are agents' output: never `status` (contracts AgentFrame; status frames are the server's). */
  async onFrame(
    runnerId: string | undefined,
    sessionId: string,
    frame: Pick<Extract<RunnerToServer, { type: "frame" }>["payload"]["frame"], "type" | "ts" | "payload">,
  ): Promise<void> {
    const session = await this.#ownedSession(runnerId, sessionId);
    if (!session) return;
    await this.#o.journal.append(sessionId, { type: frame.type, ts: frame.ts, payload: frame.payload });
  }

  async onSessionState(
    runnerId: string | undefined,
    report: Extract<RunnerToServer, { type: "session_state" }>["payload"],
  ): Promise<void> {
    const session = await this.#ownedSession(runnerId, report.session_id);
    if (!session) return;
    const decision = decideReported(session, report.state, report.reason);
    if (await this.#apply(session, decision)) this.#o.stopOnRunner(session.runner_id, session.session_id);
  }

  /** PROTOCOL.md §5: the window closed without a reattach. */
  async #expire(runnerId: string): Promise<void> {
    if (this.#o.hasLink(runnerId) || this.#closing) return;
    for (const session of await this.#o.store.listSessions({ runnerId, states: ["DISCONNECTED"] }))
      await this.#o.journal.transition(session.session_id, {
        state: "ERRORED",
        reason: SessionReasons.ReattachExpired,
        from: ["DISCONNECTED"],
      });
    this.#o.log("warn", "runner did not reattach within the window", { runner_id: runnerId });
  }

  /** Only the runner a session is placed on (`runnerId`, the link's) may speak for it. */
  async #ownedSession(runnerId: string | undefined, sessionId: string): Promise<SessionRecord | undefined> {
    const session = await this.#o.store.getSession(sessionId);
    if (session && session.runner_id === runnerId) return session;
    this.#o.log("warn", "runner spoke for a session not placed on it; dropped", {
      runner_id: runnerId,
      session_id: sessionId,
    });
    return undefined;
  }

  /** Apply a decision; true when the session must be stopped on its runner. */
  async #apply(session: SessionRecord, decision: Decision): Promise<boolean> {
    switch (decision.kind) {
      case "keep":
        return false;
      case "stop-on-runner":
        return true;
      case "set":
        await this.#o.journal.transition(session.session_id, {
          state: decision.state,
          reason: decision.reason,
          from: [session.state],
        });
        return false;
      default: {
        const exhaustive: never = decision;
        return exhaustive;
      }
    }
  }
}
