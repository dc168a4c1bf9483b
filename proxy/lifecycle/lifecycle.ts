import type { z } from "zod";
import { CodedError } from "../../contracts/errors.ts";
import { canonicalAgentRef } from "../../contracts/resources.ts";
import type { Rpc, RpcMethod, SpawnAgentRequest, SpawnAgentResponse } from "../../contracts/rpc.ts";
import { AgentMessages } from "./agent-messages.ts";
import { type KeyedLock, type KeyedLocks, processLocks } from "./keyed-mutex.ts";
import type { Admission } from "./admission.ts";
import type { Logger } from "../observability/log.ts";
import type { RunnerDirectory } from "./runner-directory.ts";
import type { SessionJournal } from "./session-journal.ts";
import { Sessions } from "./sessions.ts";
import { isLive } from "./session-states.ts";
import type { Store } from "../store/store.ts";
import type { WarmPools } from "./warm-pools.ts";
import { idempotencyKeyOf, WORKSPACE_KEY_SCOPE, type Workspaces } from "./workspaces.ts";

/**
 * What a handler narrows its answer by: `namespaces` the caller may read (undefined: every one,
 * admin). Only GetAgentStatus without `session_id` uses it; the HTTP layer decides the rest
 * (proxy/http/rpc-access.ts).
 */
export type RpcCaller = { namespaces?: ReadonlySet<string> | undefined };

export type RpcHandlers = {
  [M in RpcMethod]: (
    request: z.infer<(typeof Rpc)[M]["request"]>,
    caller?: RpcCaller,
  ) => Promise<z.infer<(typeof Rpc)[M]["response"]>>;
};

export type LifecycleOptions = {
  store: Store;
  runners: RunnerDirectory;
  journal: SessionJournal;
  log: Logger;
  /** Where Agent `secretRef` credentials are read. @default process.env */
  secretEnv?: Record<string, string | undefined>;
  /** Where new workspaces are claimed from first (proxy/warm-pools.ts). */
  warmPools?: WarmPools;
  /** What the operator admits (egress guard). @default defaultAdmission() */
  admission?: Admission;
  /**
   * The process's one Workspaces (compose-server.ts builds it, HarnessSessions use it too, so
   * every placement takes the same lock). Required: a Lifecycle that built its own would place
   * through a second lock and race the first (issue 34).
   */
  workspaces: Workspaces;
  /** Locks shared with the other server replicas. @default processLocks (this process alone) */
  locks?: KeyedLocks;
};

/**
 * The lifecycle RPCs (`POST /v1/rpc/{Method}`) over workspaces and sessions: the seed's seven,
 * and SendAgentMessage, how a client talks to the agent (and wakes a stopped session).
 */
export class Lifecycle {
  readonly workspaces: Workspaces;
  readonly sessions: Sessions;
  readonly messages: AgentMessages;
  readonly #store: Store;
  /** SpawnAgent's account rule is checked and acted on by one call at a time per account. */
  readonly #accounts: KeyedLock;

  constructor(options: LifecycleOptions) {
    this.#store = options.store;
    this.#accounts = (options.locks ?? processLocks)("accounts");
    this.workspaces = options.workspaces;
    this.sessions = new Sessions(options);
    this.messages = new AgentMessages({ ...options, sessions: this.sessions, workspaces: this.workspaces });
  }

  readonly handlers: RpcHandlers = {
    ProvisionAgentWorkspace: (request) => this.workspaces.provision(request),
    StartAgentSession: (request) => this.sessions.start(request),
    StopAgentSession: (request) => this.sessions.stop(request),
    ReloadAgentSession: (request) => this.sessions.reload(request),
    GetAgentStatus: (request, caller) => this.sessions.status(request, caller?.namespaces),
    SpawnAgent: (request) => this.spawn(request),
    RemoveAgentWorkspace: (request) => this.workspaces.remove(request),
    SendAgentMessage: (request) => this.messages.send(request),
  };

  /**
   * Provision + start for an agent account, at most one live container per account (whatever
   * the workstream or container name). Both refusals come before any provisioning:
   * ALREADY_EXISTS when the account has a live session; FAILED_PRECONDITION when it has an
   * ERRORED one (recovery is explicit: reload or stop it). A retry of a spawn that succeeded
   * (same client_request_id) returns its session.
   */
  async spawn(request: z.infer<typeof SpawnAgentRequest>): Promise<z.infer<typeof SpawnAgentResponse>> {
    const agentRef = canonicalAgentRef(request.agent_ref);
    return this.#accounts.run(agentRef, async () => {
      const sessions = await this.#store.listSessions({ agentRef });
      const live = sessions.find((s) => isLive(s.state));
      if (live) {
        const replay = request.client_request_id
          ? await this.#store.getIdempotencyKey(
              WORKSPACE_KEY_SCOPE,
              idempotencyKeyOf(agentRef, request.client_request_id),
            )
          : undefined;
        if (replay?.container_name === live.container_name)
          return { container_name: live.container_name, session_id: live.session_id, state: live.state };
        throw new CodedError(
          "ALREADY_EXISTS",
          `agent ${agentRef} already has live session ${live.session_id} in container ${live.container_name}`,
          { session_id: live.session_id, container_name: live.container_name },
        );
      }
      const errored = sessions.find((s) => s.state === "ERRORED");
      if (errored)
        throw new CodedError("FAILED_PRECONDITION", "agent errored; reload or stop it", {
          session_id: errored.session_id,
          container_name: errored.container_name,
          reason: errored.reason,
        });
      const { container_name } = await this.workspaces.provision(request);
      const started = await this.sessions.start({ container_name });
      return { container_name, ...started };
    });
  }
}
