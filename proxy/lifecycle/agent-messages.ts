import type { z } from "zod";
import { CodedError } from "../../contracts/errors.ts";
import type { MessageWake, SendAgentMessageRequest, SendAgentMessageResponse } from "../../contracts/rpc.ts";
import { SessionReasons } from "../../contracts/session-reasons.ts";
import { type KeyedLock, type KeyedLocks, processLocks } from "./keyed-mutex.ts";
import type { RunnerDirectory } from "./runner-directory.ts";
import type { SessionJournal } from "./session-journal.ts";
import type { Sessions } from "./sessions.ts";
import type { SessionRecord, Store } from "../store/store.ts";
import type { Workspaces } from "./workspaces.ts";

export type AgentMessagesOptions = {
  store: Store;
  runners: RunnerDirectory;
  journal: SessionJournal;
  sessions: Sessions;
  workspaces: Workspaces;
  /** Locks shared with the other server replicas. @default processLocks (this process alone) */
  locks?: KeyedLocks;
};

/**
 * SendAgentMessage: one command to a session's agent, relayed to its runner's `send` (one line
 * on the agent's stdin). What comes back arrives as frames on the event stream.
 *
 * The message wake: a STOPPED session (stopped deliberately, idle-stopped, or retired) is started
 * again under its id first; when that start meets NOT_FOUND (the container is gone: scaled to 0,
 * removed outside), the workspace is re-provisioned under the same name and the start retried
 * once. An ERRORED session is never woken (recovery is an explicit ReloadAgentSession).
 */
export class AgentMessages {
  readonly #store: Store;
  readonly #runners: RunnerDirectory;
  readonly #journal: SessionJournal;
  readonly #sessions: Sessions;
  readonly #workspaces: Workspaces;
  /** Messages to one session are delivered in arrival order, and wake it at most once. */
  readonly #mutex: KeyedLock;
  /** Wakes the Paused HarnessSession a workspace belongs to (set by the harness wiring). */
  #wakePaused: ((containerName: string, why: string) => Promise<void>) | undefined;

  constructor(options: AgentMessagesOptions) {
    this.#store = options.store;
    this.#runners = options.runners;
    this.#journal = options.journal;
    this.#sessions = options.sessions;
    this.#workspaces = options.workspaces;
    this.#mutex = (options.locks ?? processLocks)("messages");
  }

  /** A message to a Paused HarnessSession's agent wakes the session first (the paused tier). */
  wakePausedWith(wake: (containerName: string, why: string) => Promise<void>): void {
    this.#wakePaused = wake;
  }

  send(request: z.infer<typeof SendAgentMessageRequest>): Promise<z.infer<typeof SendAgentMessageResponse>> {
    const sessionId = request.session_id;
    return this.#mutex.run(sessionId, async () => {
      const session = await this.#store.getSession(sessionId);
      if (!session) throw new CodedError("NOT_FOUND", `session ${sessionId} not found`);
      const wake = await this.#readyOrWake(session);
      if (wake === "none") await this.#wakePaused?.(session.container_name, "an agent message");
      const outcome = await this.#runners.command(session.runner_id, {
        kind: "send",
        session_id: sessionId,
        line: JSON.stringify(request.message),
      });
      if (outcome.ok) return { session_id: sessionId, state: "READY", wake };
      if (outcome.error.code === "NOT_FOUND") {
        // The runner is authoritative about what runs: it does not hold this agent (PROTOCOL.md §3).
        await this.#journal.transition(sessionId, {
          state: "ERRORED",
          reason: SessionReasons.LostByRunner,
          from: ["READY"],
        });
        throw new CodedError(
          "FAILED_PRECONDITION",
          `session ${sessionId} is not running on its runner; reload or stop it`,
          { reason: SessionReasons.LostByRunner },
        );
      }
      throw new CodedError(
        outcome.error.code,
        `delivering to session ${sessionId} failed: ${outcome.error.message}`,
      );
    });
  }

  async #readyOrWake(session: SessionRecord): Promise<MessageWake> {
    const state = session.state;
    switch (state) {
      case "READY":
        return "none";
      case "STOPPED":
        return this.#wake(session);
      case "ERRORED":
        throw new CodedError("FAILED_PRECONDITION", "session errored; reload or stop it", {
          session_id: session.session_id,
          reason: session.reason,
        });
      case "STARTING":
      case "STOPPING":
      case "DISCONNECTED":
        throw new CodedError("UNAVAILABLE", `session ${session.session_id} is ${state}; retry`, {
          state,
        });
      default: {
        const exhaustive: never = state;
        throw new Error(`unknown state ${String(exhaustive)}`);
      }
    }
  }

  /** Start under the same id; on NOT_FOUND re-provision the workspace and start once more. */
  async #wake(session: SessionRecord): Promise<"started" | "reprovisioned"> {
    const resume = { container_name: session.container_name, resume_session_id: session.session_id };
    try {
      await this.#sessions.start(resume, { notFoundState: "STOPPED" });
      return "started";
    } catch (error) {
      const details = (error as { code?: string; details?: { reason?: unknown } }).details;
      const containerGone =
        (error as { code?: string }).code === "NOT_FOUND" &&
        details?.reason === SessionReasons.ContainerNotFound;
      if (!containerGone) throw error;
    }
    const workspace = await this.#store.getWorkspace(session.container_name);
    if (!workspace) throw new CodedError("NOT_FOUND", `container ${session.container_name} not found`);
    // An empty client_request_id: re-provision the agent's workspace for this workstream as it is.
    const provisioned = await this.#workspaces.provision({
      agent_ref: workspace.agent_ref,
      workstream: workspace.workstream,
      client_request_id: "",
    });
    if (provisioned.container_name !== session.container_name)
      throw new CodedError(
        "INTERNAL",
        `re-provisioning gave container ${provisioned.container_name}, not ${session.container_name}`,
      );
    await this.#sessions.start(resume);
    return "reprovisioned";
  }
}
