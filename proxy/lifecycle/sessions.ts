import { randomBytes } from "node:crypto";
import type { z } from "zod";
import type { SessionState } from "../../contracts/compass.ts";
import { CodedError } from "../../contracts/errors.ts";
import { REFERENCE_AGENT_COMMAND } from "../../contracts/resources.ts";
import type {
  AgentSessionStatus,
  GetAgentStatusRequest,
  GetAgentStatusResponse,
  ReloadAgentSessionRequest,
  StartAgentSessionRequest,
  StartAgentSessionResponse,
  StopAgentSessionRequest,
  StopAgentSessionResponse,
} from "../../contracts/rpc.ts";
import { SessionReasons } from "../../contracts/session-reasons.ts";
import { type KeyedLock, type KeyedLocks, processLocks } from "./keyed-mutex.ts";
import { pageOf, pageQuery } from "./pagination.ts";
import type { RunnerDirectory } from "./runner-directory.ts";
import type { SessionJournal } from "./session-journal.ts";
import { LIVE_STATES } from "./session-states.ts";
import type { SessionRecord, Store, WorkspaceRecord } from "../store/store.ts";

type StartResponse = z.infer<typeof StartAgentSessionResponse>;

export type LaunchOptions = {
  /**
   * Where a start the runner answers NOT_FOUND leaves the session. A message wake settles it
   * STOPPED: it re-provisions and retries, so the agent never errored.
   * @default "ERRORED"
   */
  notFoundState?: "ERRORED" | "STOPPED";
  /**
   * Start the agent with `resume: true` even under a new session id: a fork's first start, whose
   * volume holds the conversation its snapshot was taken with (issue 38). @default false
   */
  resume?: boolean;
};

export type SessionsOptions = {
  store: Store;
  runners: RunnerDirectory;
  journal: SessionJournal;
  /** Locks shared with the other server replicas. @default processLocks (this process alone) */
  locks?: KeyedLocks;
};

/**
 * StartAgentSession, StopAgentSession, ReloadAgentSession and GetAgentStatus: the agent process
 * in a provisioned workspace. At most one live session per container; a deliberate stop or
 * reload is never ERRORED; ERRORED is retained until an explicit reload or stop.
 */
export class Sessions {
  readonly #store: Store;
  readonly #runners: RunnerDirectory;
  readonly #journal: SessionJournal;
  /** Starts and reloads of one container never interleave (one live session per container). */
  readonly #mutex: KeyedLock;

  constructor(options: SessionsOptions) {
    this.#store = options.store;
    this.#runners = options.runners;
    this.#journal = options.journal;
    this.#mutex = (options.locks ?? processLocks)("sessions");
  }

  /**
   * A server-assigned session_id, or `resume_session_id` resumed, in a container without a live
   * session. A runner NOT_FOUND (the container is gone, checked before any exec) fails the start
   * with NOT_FOUND and leaves the session ERRORED `ContainerNotFound`, or in `options.notFoundState`.
   */
  start(
    request: z.infer<typeof StartAgentSessionRequest>,
    options: LaunchOptions = {},
  ): Promise<StartResponse> {
    return this.#mutex.run(request.container_name, async () => {
      const workspace = await this.#startableWorkspace(request.container_name);
      await this.#assertNoLiveSession(workspace.container_name);
      const resumeId = request.resume_session_id;
      if (resumeId !== undefined) {
        const previous = await this.#store.getSession(resumeId);
        if (!previous) throw new CodedError("NOT_FOUND", `session ${resumeId} not found`);
        if (previous.container_name !== workspace.container_name)
          throw new CodedError(
            "FAILED_PRECONDITION",
            `session ${resumeId} belongs to container ${previous.container_name}, not ${workspace.container_name}`,
          );
      }
      this.#assertRunner(workspace);
      return this.#launch(workspace, resumeId, options);
    });
  }

  /** Idempotent: an unknown or already stopped session is STOPPED. */
  async stop(
    request: z.infer<typeof StopAgentSessionRequest>,
  ): Promise<z.infer<typeof StopAgentSessionResponse>> {
    const stopped = { session_id: request.session_id, state: "STOPPED" as const };
    const session = await this.#store.getSession(request.session_id);
    if (!session || session.state === "STOPPED") return stopped;
    await this.#teardown(session, SessionReasons.Stopped);
    return stopped;
  }

  /** Teardown, then a fresh start under the same session_id (the agent reloads from its workspace). */
  async reload(request: z.infer<typeof ReloadAgentSessionRequest>): Promise<StartResponse> {
    const found = await this.#store.getSession(request.session_id);
    if (!found) throw new CodedError("NOT_FOUND", `session ${request.session_id} not found`);
    return this.#mutex.run(found.container_name, async () => {
      const session = await this.#store.getSession(request.session_id);
      if (!session) throw new CodedError("NOT_FOUND", `session ${request.session_id} not found`);
      const workspace = await this.#startableWorkspace(session.container_name);
      await this.#assertNoLiveSession(workspace.container_name, session.session_id);
      this.#assertRunner(workspace);
      if (session.state !== "STOPPED") await this.#teardown(session, SessionReasons.Reload);
      return this.#launch(workspace, session.session_id);
    });
  }

  /**
   * One session, or every retained one (ERRORED included) of `namespaces` (undefined: every
   * namespace's).
   */
  async status(
    request: z.infer<typeof GetAgentStatusRequest>,
    namespaces?: ReadonlySet<string>,
  ): Promise<z.infer<typeof GetAgentStatusResponse>> {
    if (request.session_id === undefined) {
      const query = pageQuery("sessions", request.page_size, request.page_token, "page_token");
      const filter = namespaces === undefined ? {} : { namespaces: [...namespaces].sort() };
      const page = pageOf("sessions", await this.#store.listSessions(filter, query), query, (s) => [
        s.created_at,
        s.session_id,
      ]);
      return {
        sessions: page.items.map(toStatus),
        ...(page.next === undefined ? {} : { next_page_token: page.next }),
      };
    }
    const session = await this.#store.getSession(request.session_id);
    if (!session) throw new CodedError("NOT_FOUND", `session ${request.session_id} not found`);
    return { sessions: [toStatus(session)] };
  }

  /** STARTING is published before the runner's `start`, READY after its ok result. */
  async #launch(
    workspace: WorkspaceRecord,
    resumeId: string | undefined,
    options: LaunchOptions = {},
  ): Promise<StartResponse> {
    const sessionId = resumeId ?? newSessionId();
    if (resumeId === undefined)
      await this.#journal.create({
        session_id: sessionId,
        container_name: workspace.container_name,
        agent_ref: workspace.agent_ref,
        runner_id: workspace.runner_id,
        state: "STARTING",
      });
    else await this.#journal.transition(sessionId, { state: "STARTING", from: ["STOPPED", "ERRORED"] });

    const outcome = await this.#runners.command(workspace.runner_id, {
      kind: "start",
      container_name: workspace.container_name,
      session_id: sessionId,
      resume: resumeId !== undefined || options.resume === true,
      // The runtime's agent, fixed with its image when the workspace was made.
      command: workspace.spec.agentCommand ?? [...REFERENCE_AGENT_COMMAND],
      // An openai-chat runtime's workload is the whole harness: no agent to start in it.
      ...(workspace.spec.session ? { mode: "none" as const } : {}),
    });
    if (!outcome.ok) {
      // A lost link leaves the session DISCONNECTED for the reattach window to settle; only a
      // start the runner refused or failed makes it ERRORED.
      const notFound = outcome.error.code === "NOT_FOUND";
      const reason = notFound ? SessionReasons.ContainerNotFound : SessionReasons.StartFailed;
      await this.#journal.transition(sessionId, {
        state: notFound ? (options.notFoundState ?? "ERRORED") : "ERRORED",
        reason,
        from: ["STARTING"],
      });
      throw new CodedError(
        outcome.error.code,
        `starting session ${sessionId} failed: ${outcome.error.message}`,
        {
          session_id: sessionId,
          reason,
        },
      );
    }
    await this.#journal.transition(sessionId, { state: outcome.result.state, from: ["STARTING"] });
    const current = await this.#store.getSession(sessionId);
    return { session_id: sessionId, state: current?.state ?? outcome.result.state };
  }

  /**
   * STOPPING, the runner's `stop`, STOPPED. A runner that no longer knows the session, or is not
   * connected, still ends in STOPPED: the stop is deliberate, and a runner that comes back with
   * the session running is told to stop it (PROTOCOL.md §3).
   */
  async #teardown(session: SessionRecord, reason: string): Promise<void> {
    await this.#journal.transition(session.session_id, {
      state: "STOPPING",
      reason,
      from: ["STARTING", "READY", "DISCONNECTED", "ERRORED"],
    });
    const outcome = await this.#runners.command(session.runner_id, {
      kind: "stop",
      session_id: session.session_id,
    });
    if (!outcome.ok && outcome.error.code !== "NOT_FOUND" && outcome.error.code !== "UNAVAILABLE")
      throw new CodedError(
        outcome.error.code,
        `stopping session ${session.session_id} failed: ${outcome.error.message}`,
      );
    await this.#journal.transition(session.session_id, { state: "STOPPED", reason });
  }

  async #startableWorkspace(containerName: string): Promise<WorkspaceRecord> {
    const workspace = await this.#store.getWorkspace(containerName);
    if (!workspace) throw new CodedError("NOT_FOUND", `container ${containerName} not found`);
    if (workspace.status !== "ready")
      throw new CodedError(
        "FAILED_PRECONDITION",
        workspace.status === "provisioning"
          ? `container ${containerName} is being provisioned`
          : `provisioning container ${containerName} failed; retry ProvisionAgentWorkspace`,
      );
    return workspace;
  }

  async #assertNoLiveSession(containerName: string, except?: string): Promise<void> {
    const live = (await this.#store.listSessions({ containerName, states: LIVE_STATES })).find(
      (s) => s.session_id !== except,
    );
    if (live)
      throw new CodedError(
        "ALREADY_EXISTS",
        `container ${containerName} already has live session ${live.session_id} (${live.state})`,
        { session_id: live.session_id, state: live.state },
      );
  }

  #assertRunner(workspace: WorkspaceRecord): void {
    if (!this.#runners.isConnected(workspace.runner_id))
      throw new CodedError(
        "UNAVAILABLE",
        `the runner of container ${workspace.container_name} is not connected`,
      );
  }
}

function newSessionId(): string {
  return `ses-${randomBytes(10).toString("hex")}`;
}

export function toStatus(session: SessionRecord): AgentSessionStatus {
  const status: AgentSessionStatus = {
    session_id: session.session_id,
    container_name: session.container_name,
    agent_ref: session.agent_ref,
    state: session.state as SessionState,
    runner_id: session.runner_id,
    updated_at: session.updated_at,
  };
  if (session.reason !== undefined) status.reason = session.reason;
  return status;
}
