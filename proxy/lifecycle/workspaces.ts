import { randomBytes, randomUUID } from "node:crypto";
import { mcpGrantsOf } from "./mcp-servers.ts";
import type { z } from "zod";
import { CodedError } from "../../contracts/errors.ts";
import { type Agent, type AgentRuntime, parseAgentRef, type SkillPack } from "../../contracts/resources.ts";
import type {
  ProvisionAgentWorkspaceRequest,
  ProvisionAgentWorkspaceResponse,
  RemoveAgentWorkspaceRequest,
  RemoveAgentWorkspaceResponse,
} from "../../contracts/rpc.ts";
import type { RunnerSelector } from "../../contracts/runners.ts";
import { SessionReasons } from "../../contracts/session-reasons.ts";
import { type SessionSpec, workloadName } from "../../contracts/session-spec.ts";
import { gatewayFieldOf } from "./gateway-grant.ts";
import { type KeyedLock, type KeyedLocks, processLocks } from "./keyed-mutex.ts";
import { sessionKey } from "./namespace-quotas.ts";
import type { Logger } from "../observability/log.ts";
import { chooseRunner, type EngineRequirement, type ForkSeed } from "./placement.ts";
import type { RunnerDirectory } from "./runner-directory.ts";
import type { SessionJournal } from "./session-journal.ts";
import { type Admission, defaultAdmission } from "./admission.ts";
import { assertSessionRuntime, buildSessionSpec, resolveCredentials } from "./session-spec-builder.ts";
import { agentSkillPacks } from "./skill-packs.ts";
import { LIVE_STATES } from "./session-states.ts";
import { SingleFlight } from "./single-flight.ts";
import type { WarmPools } from "./warm-pools.ts";
import type { RunnerRecord, Store, WorkspaceRecord } from "../store/store.ts";
import { workspaceName as workspaceNameFor } from "./workspace-name.ts";
import { type WorkspaceRepo, seedRepoOf, workstreamParts } from "../../contracts/workspace-repo.ts";

/** A provision request with its workstream split into name and repository (workstreamParts). */
type ProvisionRequest = Omit<z.infer<typeof ProvisionAgentWorkspaceRequest>, "workstream"> & {
  workstream: string;
  repo?: WorkspaceRepo;
  /** A new workspace only on runners of these engines (placement.ts). */
  engines?: EngineRequirement;
  /** A fork's seed: placed on its runner, `spec.seedSnapshot` sent (placement.ts ForkSeed). */
  seed?: ForkSeed;
  /** A HarnessSession's declared ports (spec.ports): in its spec, for the runner and the network rules. */
  ports?: SessionSpec["ports"];
};
type ProvisionResponse = z.infer<typeof ProvisionAgentWorkspaceResponse>;

/** Idempotency scope of workspace creation (ProvisionAgentWorkspace and SpawnAgent share it). */
export const WORKSPACE_KEY_SCOPE = "workspace";

/**
 * The stored idempotency key of a `client_request_id`: keyed with the caller's agent
 * (`namespace/name`), so two namespaces (or two Agents) choosing one id never share a workspace,
 * a refusal or a single flight (issue 17).
 */
export function idempotencyKeyOf(agentRef: string, requestId: string): string {
  return `${agentRef}|${requestId}`;
}

export type WorkspacesOptions = {
  store: Store;
  runners: RunnerDirectory;
  journal: SessionJournal;
  log: Logger;
  /** The environment offered to sessions (offeredCredentialEnv), where `secretRef` credentials are read. @default none */
  secretEnv?: Record<string, string | undefined>;
  /** Where a new workspace is claimed from before provisioning one (runner/sessions/warm-pool.ts). */
  warmPools?: WarmPools;
  /** What the operator admits (egress guard). @default defaultAdmission() */
  admission?: Admission;
  /**
   * Locks shared with the other server replicas: placement, warm-pool claims and idempotency keys
   * are then decided by one replica at a time. @default processLocks (this process alone)
   */
  locks?: KeyedLocks;
};

/**
 * ProvisionAgentWorkspace and RemoveAgentWorkspace. A workspace is the container/pod + volume of
 * one `(agent, workstream)`; provisioning is apart from starting a session in it.
 */
export class Workspaces {
  readonly #store: Store;
  readonly #runners: RunnerDirectory;
  readonly #journal: SessionJournal;
  readonly #log: Logger;
  readonly #secretEnv: Record<string, string | undefined>;
  /** Retries of one client_request_id share one execution. */
  readonly #flight = new SingleFlight();
  readonly #warmPools: WarmPools | undefined;
  readonly #admission: Admission;
  /** One provisioning or removal per `(agent, workstream)` at a time in this process. */
  readonly #mutex: KeyedLock;
  /**
   * From choosing a runner to the store holding the workspace that counts on it, one placement at
   * a time in this process: concurrent provisions never put more on a runner than its capacity.
   */
  readonly #placing: KeyedLock;

  constructor(options: WorkspacesOptions) {
    this.#store = options.store;
    this.#runners = options.runners;
    this.#journal = options.journal;
    this.#log = options.log;
    this.#warmPools = options.warmPools;
    this.#secretEnv = options.secretEnv ?? {};
    this.#admission = options.admission ?? defaultAdmission();
    const locks = options.locks ?? processLocks;
    this.#mutex = locks("workspaces");
    this.#placing = locks("placement");
  }

  /**
   * Idempotent on `client_request_id`: a retry (also a concurrent one) returns the same
   * `container_name` and provisions nothing more. Another request for the same agent and
   * workstream re-provisions the existing workspace under its name (a container removed outside is
   * replaced, an ERRORED session in it is retired) unless a session is live in it. An empty
   * `client_request_id` opts out of idempotency.
   */
  provision(
    input: z.infer<typeof ProvisionAgentWorkspaceRequest>,
    /**
     * `engines`: a new workspace goes only to a runner of one (a HarnessSession in the paused tier);
     * `seed`: a fork's, seeded from its snapshot on the runner holding it.
     */
    placement: { engines?: EngineRequirement; seed?: ForkSeed; ports?: SessionSpec["ports"] } = {},
  ): Promise<ProvisionResponse> {
    const { name: workstream, repo } = workstreamParts(input.workstream);
    const request: ProvisionRequest = {
      ...input,
      workstream,
      ...(repo ? { repo } : {}),
      ...(placement.engines ? { engines: placement.engines } : {}),
      ...(placement.seed ? { seed: placement.seed } : {}),
      ...(placement.ports?.length ? { ports: placement.ports } : {}),
    };
    const { namespace, name } = parseAgentRef(request.agent_ref);
    const agentRef = `${namespace}/${name}`;
    const run = () =>
      this.#mutex.run(mutexKey(agentRef, request.workstream), () => this.#provision(agentRef, request));
    return request.client_request_id
      ? this.#flight.run(idempotencyKeyOf(agentRef, request.client_request_id), run)
      : run();
  }

  async #provision(agentRef: string, request: ProvisionRequest): Promise<ProvisionResponse> {
    const requestId = request.client_request_id;
    const fingerprint = JSON.stringify([agentRef, request.workstream]);
    const known = requestId ? await this.#knownRequest(agentRef, requestId) : undefined;
    if (known && known.fingerprint !== fingerprint) throw reusedRequestId(requestId);
    const existing = known
      ? await this.#store.getWorkspace(known.container_name)
      : await this.#store.findWorkspace(agentRef, request.workstream);
    // `created`: this client_request_id created the workspace (a retry of it says so too).
    const response = (w: WorkspaceRecord, inserted = false): ProvisionResponse => ({
      container_name: w.container_name,
      created:
        inserted ||
        (requestId !== "" &&
          // A workspace made before keys carried the agent holds the bare id.
          (w.client_request_id === idempotencyKeyOf(agentRef, requestId) ||
            w.client_request_id === requestId)),
    });

    // A retry of a request that completed: the recorded answer, nothing sent anywhere.
    if (known && existing?.status === "ready") return response(existing);
    // Another request for a workspace a session is using: leave it untouched.
    if (existing && existing.status === "ready" && (await this.#hasLiveSession(existing))) {
      if (requestId) await this.#claim(agentRef, requestId, fingerprint, existing.container_name);
      return response(existing);
    }

    // From here on something is provisioned: every check that can refuse comes first.
    const { agent, runtime, skillPacks } = await this.#resolveAgent(agentRef);
    // A new workspace takes a place of its namespace's session quota, refused before anything is made.
    const release = existing
      ? undefined
      : await this.#admission.quotas?.reserveSession(
          parseAgentRef(agentRef).namespace,
          sessionKey(agentRef, request.workstream),
        );
    try {
      // A warm entry holds no checkout nor a fork's seed: those are provisioned the slow way.
      // Nor declared ports (a warm entry's network rules know none).
      if (!existing && !request.repo && !request.seed && !request.ports) {
        const claimed = await this.#placing.run("placement", () =>
          this.#fromWarmPool(agentRef, request, agent, runtime),
        );
        if (claimed) {
          if (requestId) await this.#claim(agentRef, requestId, fingerprint, claimed.container_name);
          return response(claimed, true);
        }
      }
      const { namespace } = parseAgentRef(agentRef);
      const credentials = resolveCredentials(agent, this.#secretEnv);
      const mcp = await mcpGrantsOf(this.#store, agent, runtime, this.#admission, this.#secretEnv);
      let runner: RunnerRecord;
      let spec: SessionSpec;
      let workspace: WorkspaceRecord;
      if (existing) {
        // A workspace already placed stays on its runner (a draining one too: nothing moves).
        const its = this.#runners.connectedRunners().find((r) => r.runner_id === existing.runner_id);
        if (!its) {
          // Named, with what to do: the workspace's volume is on that runner, so nothing else serves it.
          const name = (await this.#store.findRunner(existing.runner_id))?.runner_name ?? existing.runner_id;
          throw new CodedError(
            "UNAVAILABLE",
            `runner ${name}, which holds workspace ${existing.container_name}, is not connected`,
            { remedy: `start runner ${name} again (its workspace stays on it); nothing else can serve it` },
          );
        }
        runner = its;
        spec = withSeed(
          request.seed,
          buildSessionSpec({
            namespace,
            name: existing.spec.name,
            engine: runner.engine,
            agent,
            runtime,
            skillPacks,
            admission: this.#admission,
            // Seeded once: a re-provision names the repository it was seeded from (a no-op then).
            repo: request.repo ? seedRepoOf(request.repo) : existing.spec.repo,
            ports: request.ports,
          }),
        );
        workspace =
          (await this.#store.updateWorkspace(existing.container_name, { status: "provisioning" })) ??
          existing;
      } else {
        ({ runner, spec, workspace } = await this.#placing.run("placement", async () => {
          const runnerId = request.seed
            ? this.#seedRunner(request.seed)
            : await this.#place(request.runner_selector, request.engines);
          const chosen = this.#runners.connectedRunners().find((r) => r.runner_id === runnerId);
          if (!chosen) throw new CodedError("UNAVAILABLE", `runner ${runnerId} is not connected`);
          const sessionName = workspaceNameFor(
            agent.metadata.name,
            request.workstream,
            requestId || randomUUID(),
          );
          const chosenSpec = withSeed(
            request.seed,
            buildSessionSpec({
              namespace,
              name: sessionName,
              engine: chosen.engine,
              agent,
              runtime,
              skillPacks,
              admission: this.#admission,
              repo: request.repo ? seedRepoOf(request.repo) : undefined,
              ports: request.ports,
            }),
          );
          const inserted = await this.#insert({
            container_name: workloadName(namespace, sessionName),
            agent_ref: agentRef,
            workstream: request.workstream,
            client_request_id: requestId
              ? idempotencyKeyOf(agentRef, requestId)
              : `generated-${randomUUID()}`,
            runner_id: chosen.runner_id,
            spec: chosenSpec,
            adapter_token: randomBytes(32).toString("base64url"),
          });
          return { runner: chosen, spec: chosenSpec, workspace: inserted };
        }));
      }
      if (requestId) await this.#claim(agentRef, requestId, fingerprint, workspace.container_name);

      const outcome = await this.#runners.command(runner.runner_id, {
        kind: "provision",
        container_name: workspace.container_name,
        spec,
        credentials,
        adapter_token: workspace.adapter_token,
        ...gatewayFieldOf(agent),
        ...(mcp.length > 0 ? { mcp } : {}),
      });
      if (!outcome.ok) {
        await this.#store.updateWorkspace(workspace.container_name, { status: "failed" });
        throw new CodedError(
          outcome.error.code,
          `provisioning workspace ${workspace.container_name} failed: ${outcome.error.message}`,
          outcome.error.details,
        );
      }
      if (outcome.result.container_name !== workspace.container_name)
        this.#log("warn", "runner named the container differently", {
          expected: workspace.container_name,
          got: outcome.result.container_name,
        });
      // The commit a seed fetched now: kept for the diff, as the runner saw it (a provision that
      // fetched nothing leaves the recorded one as it was).
      const seeded = outcome.result.seeded_commit;
      // A fork's seed copied now (issue 38): no provision carries it again.
      const seededSnapshot = outcome.result.seeded_snapshot;
      const ready = await this.#store.updateWorkspace(workspace.container_name, {
        status: "ready",
        endpoint: outcome.result.endpoint,
        ...(seeded && spec.repo ? { seeded_commit: seeded } : {}),
        ...(seededSnapshot && spec.seedSnapshot ? { seeded_snapshot: seededSnapshot } : {}),
      });
      if (spec.seedSnapshot && !seededSnapshot)
        this.#log(
          "warn",
          "a fork's provision did not say it seeded the snapshot: the seed is sent again next time",
          {
            container_name: workspace.container_name,
            snapshot: spec.seedSnapshot.storage,
          },
        );
      if (spec.repo && !seeded && !ready?.seeded_commit)
        this.#log(
          "warn",
          "a workspace seeded from a repository has no recorded seeded commit: its diff is refused",
          {
            container_name: workspace.container_name,
          },
        );
      // The replacement is up: an ERRORED session in it no longer blocks the account (it can
      // still be resumed by id).
      for (const session of await this.#store.listSessions({
        containerName: workspace.container_name,
        states: ["ERRORED"],
      }))
        await this.#journal.transition(session.session_id, {
          state: "STOPPED",
          reason: SessionReasons.Retired,
          from: ["ERRORED"],
        });
      return response(ready ?? workspace, !existing);
    } finally {
      release?.();
    }
  }

  /** Runner `remove`, then forget the workspace with its sessions and keys. Unknown → removed: false. */
  async remove(
    request: z.infer<typeof RemoveAgentWorkspaceRequest>,
  ): Promise<z.infer<typeof RemoveAgentWorkspaceResponse>> {
    const found = await this.#store.getWorkspace(request.container_name);
    if (!found) return { container_name: request.container_name, removed: false };
    return this.#mutex.run(mutexKey(found.agent_ref, found.workstream), async () => {
      const workspace = await this.#store.getWorkspace(request.container_name);
      if (!workspace) return { container_name: request.container_name, removed: false };
      const outcome = await this.#runners.command(workspace.runner_id, {
        kind: "remove",
        container_name: workspace.container_name,
      });
      if (!outcome.ok && outcome.error.code !== "NOT_FOUND")
        throw new CodedError(
          outcome.error.code,
          `removing workspace ${workspace.container_name} failed: ${outcome.error.message}`,
        );
      for (const session of await this.#store.listSessions({
        containerName: workspace.container_name,
        states: LIVE_STATES,
      }))
        await this.#journal.transition(session.session_id, {
          state: "STOPPED",
          reason: SessionReasons.WorkspaceRemoved,
        });
      await this.#store.deleteWorkspace(workspace.container_name);
      return { container_name: workspace.container_name, removed: true };
    });
  }

  /** The Agent, its runtime and SkillPacks, or the reason no session can be provisioned for it. */
  async #resolveAgent(
    agentRef: string,
  ): Promise<{ agent: Agent; runtime: AgentRuntime; skillPacks: SkillPack[] }> {
    const { namespace, name } = parseAgentRef(agentRef);
    const agent = (await this.#store.getResource("Agent", namespace, name)) as Agent | undefined;
    if (!agent) throw new CodedError("NOT_FOUND", `Agent ${agentRef} not found`);
    const runtime = (await this.#store.getResource("AgentRuntime", namespace, agent.spec.runtimeRef)) as
      | AgentRuntime
      | undefined;
    if (!runtime)
      throw new CodedError(
        "FAILED_PRECONDITION",
        `AgentRuntime ${namespace}/${agent.spec.runtimeRef} of Agent ${agentRef} not found`,
        { reason: "RuntimeNotFound" },
      );
    assertSessionRuntime(runtime, this.#admission);
    return { agent, runtime, skillPacks: await agentSkillPacks(this.#store, agent) };
  }

  /**
   * A new workspace claimed from the Agent's warm pool: recorded under the container name and
   * spec the runner returns (the pool entry's own, never re-derived from agent and workstream),
   * then an ordinary workspace of this account. Undefined when there is no pool or no ready entry:
   * the caller provisions the slow way.
   */
  async #fromWarmPool(
    agentRef: string,
    request: ProvisionRequest,
    agent: Agent,
    runtime: AgentRuntime,
  ): Promise<WorkspaceRecord | undefined> {
    const target = await this.#warmPools?.target(agent, runtime);
    if (!target) return undefined;
    // A claim is a placement too: only on a runner the request's selector matches, not draining, with room.
    if (!(await this.#placeable(target.runnerId, request.runner_selector, request.engines))) return undefined;
    const outcome = await this.#runners.command(target.runnerId, {
      kind: "claim_warm",
      pool: target.pool,
      fingerprint: target.fingerprint,
    });
    if (!outcome.ok) {
      if (outcome.error.code !== "NOT_FOUND")
        this.#log("warn", "claiming a warm workspace failed", {
          agent_ref: agentRef,
          code: outcome.error.code,
        });
      return undefined;
    }
    const claimed = outcome.result;
    try {
      await this.#insert({
        container_name: claimed.container_name,
        agent_ref: agentRef,
        workstream: request.workstream,
        client_request_id: request.client_request_id
          ? idempotencyKeyOf(agentRef, request.client_request_id)
          : `generated-${randomUUID()}`,
        runner_id: target.runnerId,
        spec: claimed.spec,
        adapter_token: claimed.adapter_token,
      });
    } catch (error) {
      // Claimed but not recorded: destroy it rather than leave an orphan.
      await this.#runners.command(target.runnerId, {
        kind: "remove",
        container_name: claimed.container_name,
      });
      throw error;
    }
    const ready = await this.#store.updateWorkspace(claimed.container_name, {
      status: "ready",
      endpoint: claimed.endpoint,
    });
    this.#log("info", "workspace claimed from the warm pool", {
      agent_ref: agentRef,
      container_name: claimed.container_name,
    });
    return ready;
  }

  /**
   * A fork's new workspace goes on the runner holding its snapshot, whatever its load: the copy is
   * made on that engine. Not connected: UNAVAILABLE naming it.
   */
  #seedRunner(seed: ForkSeed): string {
    const its = this.#runners.connectedRunners().find((r) => r.runner_id === seed.runnerId);
    if (!its)
      throw new CodedError(
        "UNAVAILABLE",
        `runner ${seed.runnerName}, which holds snapshot ${seed.storage.namespace}/${seed.storage.name} this fork is seeded from, is not connected`,
        {
          remedy: `start runner ${seed.runnerName} again; a fork is made on the engine holding its snapshot`,
        },
      );
    if (its.draining)
      throw new CodedError(
        "UNAVAILABLE",
        `runner ${seed.runnerName}, which holds snapshot ${seed.storage.namespace}/${seed.storage.name} this fork is seeded from, is draining: it takes no new workspace`,
        { remedy: `undrain runner ${seed.runnerName} (a fork is made on the engine holding its snapshot)` },
      );
    return its.runner_id;
  }

  /** A runner for a new workspace: labels matching `selector`, not draining, with room (placement.ts). */
  async #place(selector: RunnerSelector | undefined, engines?: EngineRequirement): Promise<string> {
    const { connected, load } = await this.#placementView();
    const placement = chooseRunner(connected, load, selector, engines);
    if (!placement.ok) throw new CodedError(placement.code, placement.message, placement.details);
    return placement.runner.runner_id;
  }

  /** Whether placement would allow a new workspace on this runner (selector, drain, capacity). */
  async #placeable(
    runnerId: string,
    selector: RunnerSelector | undefined,
    engines?: EngineRequirement,
  ): Promise<boolean> {
    const { connected, load } = await this.#placementView();
    return chooseRunner(
      connected.filter((r) => r.runner_id === runnerId),
      load,
      selector,
      engines,
    ).ok;
  }

  /** Connected runners with the store's drain flag, and the workspaces placed on each. */
  async #placementView(): Promise<{ connected: RunnerRecord[]; load: Map<string, number> }> {
    // Counted in the store: reading every workspace made each placement O(workspaces).
    const load = await this.#store.countWorkspacesByRunner();
    // Warm pool entries hold places of their runner's capacity too.
    for (const [runnerId, entries] of this.#warmPools?.reservedByRunner() ?? [])
      load.set(runnerId, (load.get(runnerId) ?? 0) + entries);
    // The drain flag is the store's: an admin may have set it after the runner attached.
    const stored = new Map((await this.#store.listRunners()).map((r) => [r.runner_id, r]));
    const connected = this.#runners
      .connectedRunners()
      .map((r) => ({ ...r, draining: stored.get(r.runner_id)?.draining ?? r.draining }));
    return { connected, load };
  }

  async #hasLiveSession(workspace: WorkspaceRecord): Promise<boolean> {
    const live = await this.#store.listSessions({
      containerName: workspace.container_name,
      states: LIVE_STATES,
    });
    return live.length > 0;
  }

  async #insert(workspace: Parameters<Store["insertWorkspace"]>[0]): Promise<WorkspaceRecord> {
    try {
      return await this.#store.insertWorkspace(workspace);
    } catch (error) {
      // Another server replica won the race for this workspace: the caller may retry.
      if (error instanceof Error && error.name === "StoreConflictError")
        throw new CodedError(
          "ABORTED",
          `workspace ${workspace.container_name} is being provisioned concurrently; retry`,
        );
      throw error;
    }
  }

  /**
   * The workspace a `client_request_id` of this agent named before. A key stored before keys
   * carried the agent (an older release) still counts when it was this agent's (its fingerprint
   * names the agent), so a retry across the upgrade provisions nothing new.
   */
  async #knownRequest(agentRef: string, requestId: string) {
    const known = await this.#store.getIdempotencyKey(
      WORKSPACE_KEY_SCOPE,
      idempotencyKeyOf(agentRef, requestId),
    );
    if (known) return known;
    const legacy = await this.#store.getIdempotencyKey(WORKSPACE_KEY_SCOPE, requestId);
    return legacy && (JSON.parse(legacy.fingerprint) as unknown[])[0] === agentRef ? legacy : undefined;
  }

  async #claim(
    agentRef: string,
    requestId: string,
    fingerprint: string,
    containerName: string,
  ): Promise<void> {
    const claim = await this.#store.claimIdempotencyKey({
      scope: WORKSPACE_KEY_SCOPE,
      key: idempotencyKeyOf(agentRef, requestId),
      fingerprint,
      container_name: containerName,
    });
    if (!claim.claimed && claim.existing.container_name !== containerName) throw reusedRequestId(requestId);
  }
}

/** The spec with the fork's seed (`seedSnapshot`) when there is one to copy. */
function withSeed(seed: ForkSeed | undefined, spec: SessionSpec): SessionSpec {
  return seed ? { ...spec, seedSnapshot: seed.storage } : spec;
}

function mutexKey(agentRef: string, workstream: string): string {
  return `${agentRef}\u0000${workstream}`;
}

function reusedRequestId(requestId: string): CodedError {
  return new CodedError(
    "INVALID_ARGUMENT",
    `client_request_id ${requestId} was already used for another agent_ref or workstream`,
    { field: "client_request_id" },
  );
}
