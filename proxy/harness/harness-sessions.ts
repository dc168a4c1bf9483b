import { randomUUID } from "node:crypto";
import { sameJson } from "../lifecycle/unchanged-write.ts";
import { CodedError } from "../../contracts/errors.ts";
import {
  HARNESS_SESSION_KIND,
  type HarnessSession,
  HarnessSessionInput,
  type HarnessSessionSpec,
  HarnessReasons,
  IMMUTABLE_SPEC_FIELDS,
  PAUSABLE_ENGINES,
  pauseAfterViolations,
  wantsPausedTier,
} from "../../contracts/harness-session.ts";
import { expiryOf, expiryViolations } from "../../contracts/session-expiry.ts";
import { formatLabels, selectorMatches } from "../../contracts/runners.ts";
import type { Engine } from "../../contracts/session-spec.ts";
import type { RunnerDirectory } from "../lifecycle/runner-directory.ts";
import type { ListMetadata } from "../../contracts/pagination.ts";
import { type Agent, type AgentRuntime, API_VERSION } from "../../contracts/resources.ts";
import { sessionStackName } from "../../contracts/session-spec.ts";
import type { HarnessController } from "./harness-controller.ts";
import { usableSnapshot } from "./snapshot-usable.ts";
import { harnessWorkstream } from "./harness-reconciler.ts";
import { toManifest, withReady } from "./harness-status.ts";
import { mergePatch } from "../lifecycle/merge-patch.ts";
import { type NamespaceQuotas, sessionKey } from "../lifecycle/namespace-quotas.ts";
import { listQuery, pageOf } from "../lifecycle/pagination.ts";
import { parseInput, withPathMetadata } from "../lifecycle/request-body.ts";
import { alreadyExists } from "../lifecycle/already-exists.ts";
import { assertRepoAdmitted } from "../lifecycle/session-spec-builder.ts";
import type { HarnessRecord, HarnessStore } from "../store/harness-store.ts";
import type { Store } from "../store/store.ts";

export type HarnessSessionsOptions = {
  harness: HarnessStore;
  /**
   * Where the Agent a new session names is read (a binding that could never work is refused),
   * and its workspace (whose stack status shows).
   */
  store: Pick<Store, "getResource" | "getWorkspace" | "findWorkspace" | "listRunners">;
  controller: Pick<HarnessController, "enqueue" | "delete" | "event">;
  /**
   * The connected runners, where a session not placed yet could go (the paused tier is checked
   * against them). @default none known: such a session is not refused
   */
  runners?: Pick<RunnerDirectory, "connectedRunners">;
  /** A new session over its namespace's quota is refused (RESOURCE_EXHAUSTED). @default none */
  quotas?: NamespaceQuotas;
  /** @default () => new Date() */
  now?: () => Date;
};

/** Optimistic writes retry this often when another writer bumped the generation first. */
const WRITE_ATTEMPTS = 5;

/**
 * The HarnessSession resource: PUT creates or replaces (kubectl-style; `status` in the body is
 * ignored), PATCH applies a JSON merge patch (RFC 7386) to the manifest, GET reads one or lists,
 * DELETE tears the session down and forgets it. agentRef and runtimeRef are immutable. Every
 * accepted write bumps the generation and asks the controller to reconcile.
 */
export class HarnessSessions {
  readonly #harness: HarnessStore;
  readonly #store: HarnessSessionsOptions["store"];
  readonly #controller: HarnessSessionsOptions["controller"];
  readonly #now: () => Date;
  readonly #quotas: NamespaceQuotas | undefined;
  readonly #runners: HarnessSessionsOptions["runners"];

  constructor(options: HarnessSessionsOptions) {
    this.#runners = options.runners;
    this.#harness = options.harness;
    this.#store = options.store;
    this.#quotas = options.quotas;
    this.#controller = options.controller;
    this.#now = options.now ?? (() => new Date());
  }

  /** A page of one namespace's, by name (`?limit=&continue=` as they came). */
  /** One namespace's sessions by name, or (namespace undefined) every namespace's by namespace, name. */
  async list(
    namespace: string | undefined,
    raw: { limit?: string | undefined; continue?: string | undefined } = {},
  ): Promise<{ apiVersion: string; kind: string; metadata: ListMetadata; items: HarnessSession[] }> {
    const list = `harnesssessions/${namespace ?? "*"}`;
    const query = listQuery(list, raw);
    const page = pageOf(list, await this.#harness.listHarnessSessions(namespace, query), query, (r) =>
      namespace === undefined ? [r.namespace, r.name] : [r.name],
    );
    return {
      apiVersion: API_VERSION,
      kind: `${HARNESS_SESSION_KIND}List`,
      metadata: page.next === undefined ? {} : { continue: page.next },
      items: await Promise.all(page.items.map((r) => this.#shown(r))),
    };
  }

  async get(namespace: string, name: string): Promise<HarnessSession> {
    return this.#shown(await this.#existing(namespace, name));
  }

  async put(
    namespace: string,
    name: string,
    body: unknown,
    /** Create only (`If-None-Match: *`): an existing session is ALREADY_EXISTS, left as it is. */
    opts: { ifAbsent?: boolean } = {},
  ): Promise<{ session: HarnessSession; created: boolean; unchanged?: boolean }> {
    const input = parseInput(
      HarnessSessionInput,
      withPathMetadata(body, namespace, name),
      HARNESS_SESSION_KIND,
    );
    if (input.metadata.name !== name || input.metadata.namespace !== namespace)
      throw new CodedError(
        "INVALID_ARGUMENT",
        `invalid ${HARNESS_SESSION_KIND}: metadata.name and metadata.namespace must match the path (${namespace}/${name})`,
        { field_violations: [{ field: "metadata", description: "must match the path" }] },
      );
    return this.#write(namespace, name, () => input.spec, {
      mustNotExist: opts.ifAbsent === true,
      unchangedIsNoop: true,
    });
  }

  async patch(namespace: string, name: string, body: unknown): Promise<HarnessSession> {
    if (!body || typeof body !== "object" || Array.isArray(body))
      throw new CodedError("INVALID_ARGUMENT", "a merge patch must be a JSON object (RFC 7386)");
    const { session } = await this.#write(
      namespace,
      name,
      (current) => {
        if (!current) throw notFound(namespace, name);
        const manifest = {
          apiVersion: API_VERSION,
          kind: HARNESS_SESSION_KIND,
          metadata: { name, namespace },
          spec: current.spec,
        };
        // Status is observed, never written by clients: a patch of it is ignored (Kubernetes does so too).
        const { status: _ignored, ...patch } = body as Record<string, unknown>;
        const patched = parseInput(HarnessSessionInput, mergePatch(manifest, patch), HARNESS_SESSION_KIND);
        if (patched.metadata.name !== name || patched.metadata.namespace !== namespace)
          throw new CodedError("INVALID_ARGUMENT", "metadata.name and metadata.namespace cannot be patched");
        return patched.spec;
      },
      { mustExist: true },
    );
    return session;
  }

  /**
   * Marks the session deleted (no request is admitted from then on), then waits for the teardown:
   * the answer is the last state of the session, with its deletionTimestamp.
   */
  async delete(namespace: string, name: string): Promise<HarnessSession> {
    const marked = await this.#harness.markHarnessDeleting(namespace, name, this.#now().toISOString());
    if (!marked) throw notFound(namespace, name);
    await this.#controller.delete(namespace, name);
    return this.#shown(marked);
  }

  /**
   * Expiry (contracts/session-expiry.ts): once the session's spec.ttl or spec.expiresAt is reached
   * it is deleted as DELETE would (its snapshots are kept), with reason Expired on its Ready
   * condition and an `Expired` event on its stream saying which field and when. False when it is
   * gone, already being deleted, or its spec (read again here: it may have been extended since the
   * sweep listed it) does not end by now.
   */
  async expire(namespace: string, name: string): Promise<boolean> {
    const current = await this.#harness.getHarnessSession(namespace, name);
    if (!current || current.deletion_requested_at !== undefined) return false;
    const end = expiryOf(current.spec, current.created_at);
    const now = this.#now();
    if (end === undefined || Date.parse(end) > now.getTime()) return false;
    const marked = await this.#harness.markHarnessDeleting(namespace, name, now.toISOString());
    if (!marked) return false;
    const why =
      current.spec.ttl !== undefined
        ? `spec.ttl ${current.spec.ttl} after its creation reached at ${end}`
        : `spec.expiresAt ${end} reached`;
    await this.#controller.event(marked, "Expired", {
      reason: HarnessReasons.Expired,
      message: why,
      expiresAt: end,
    });
    await this.#controller.delete(namespace, name, {
      reason: HarnessReasons.Expired,
      message: `expired (${why}): deleting; its snapshots are kept`,
    });
    return true;
  }

  async #write(
    namespace: string,
    name: string,
    specFor: (current: HarnessRecord | undefined) => HarnessSessionSpec,
    opts: { mustExist?: boolean; mustNotExist?: boolean; unchangedIsNoop?: boolean } = {},
  ): Promise<{ session: HarnessSession; created: boolean; unchanged?: boolean }> {
    for (let attempt = 0; attempt < WRITE_ATTEMPTS; attempt++) {
      const current = await this.#harness.getHarnessSession(namespace, name);
      if (!current && opts.mustExist) throw notFound(namespace, name);
      // Also after losing a race to create it: the loop reads it back and refuses then.
      if (current && opts.mustNotExist) throw alreadyExists(HARNESS_SESSION_KIND, namespace, name);
      let spec = specFor(current);
      await this.#assertPausable(namespace, name, spec, current);
      // Left out: the one already set, else the Agent's (#bindable); once set it is immutable.
      if (spec.runtimeRef === undefined && current?.spec.runtimeRef !== undefined)
        spec = { ...spec, runtimeRef: current.spec.runtimeRef };
      // Not bound yet (new, or applied before its Agent): bound now if the Agent exists.
      if (current?.spec.runtimeRef === undefined) spec = await this.#bindable(namespace, spec);
      // A fork (issue 38): its snapshot is checked when it is created, nothing stored otherwise.
      if (!current && spec.source !== undefined) {
        const snapshot = await usableSnapshot(
          this.#store,
          namespace,
          spec.source.snapshotRef,
          spec.agentRef,
          spec.runtimeRef,
          "spec.source.snapshotRef",
        );
        spec = { ...spec, runtimeRef: spec.runtimeRef ?? snapshot.spec.runtimeRef };
      }
      if (!current) {
        const release = await this.#quotas?.reserveSession(
          namespace,
          sessionKey(`${namespace}/${spec.agentRef}`, harnessWorkstream(name)),
        );
        try {
          const created = await this.#harness.createHarnessSession({
            namespace,
            name,
            uid: randomUUID(),
            spec,
            conditions: withReady(
              [],
              { status: "False", reason: HarnessReasons.Provisioning, message: "waiting for the controller" },
              this.#now().toISOString(),
            ),
          });
          this.#controller.enqueue(namespace, name);
          return { session: toManifest(created), created: true };
        } catch (error) {
          if ((error as Error).name === "StoreConflictError") continue; // created concurrently: replace it
          throw error;
        } finally {
          release?.();
        }
      }
      if (current.deletion_requested_at !== undefined)
        throw new CodedError(
          "FAILED_PRECONDITION",
          `${HARNESS_SESSION_KIND} ${namespace}/${name} is being deleted`,
        );
      assertImmutable(current.spec, spec);
      // The same spec PUT again (an identical `apply`): nothing to do, the generation stays, as
      // kubectl's "unchanged". A PATCH always writes: `resume` of a Failed session patches the
      // desiredState it has already, and the new generation is what retries it.
      if (opts.unchangedIsNoop && sameJson(current.spec, spec))
        return { session: await this.#shown(current), created: false, unchanged: true };
      const replaced = await this.#harness.replaceHarnessSpec(namespace, name, spec, current.generation);
      if (!replaced) continue;
      this.#controller.enqueue(namespace, name);
      return { session: await this.#shown(replaced), created: false };
    }
    throw new CodedError(
      "ABORTED",
      `${HARNESS_SESSION_KIND} ${namespace}/${name} is being written concurrently; retry`,
    );
  }

  /**
   * A new session whose Agent exists must be one that can work: its runtimeRef the Agent's
   * (INVALID_ARGUMENT naming both: runtimeRef is immutable, so a Failed session could never be
   * fixed) and its repository within the Agent's egress (FAILED_PRECONDITION, as the RPC path
   * answers). A session naming an Agent not there yet is accepted: it waits for the Agent. Returns
   * the spec with runtimeRef filled in from the Agent when it was left out (issue 34 item 4).
   */
  async #bindable(namespace: string, given: HarnessSessionSpec): Promise<HarnessSessionSpec> {
    const agent = (await this.#store.getResource("Agent", namespace, given.agentRef)) as Agent | undefined;
    if (!agent) return given;
    const spec = { ...given, runtimeRef: given.runtimeRef ?? agent.spec.runtimeRef };
    if (agent.spec.runtimeRef !== spec.runtimeRef)
      throw new CodedError(
        "INVALID_ARGUMENT",
        `invalid ${HARNESS_SESSION_KIND}: spec.runtimeRef is ${spec.runtimeRef} but Agent ${namespace}/${spec.agentRef} runs on ${agent.spec.runtimeRef}; name runtime ${agent.spec.runtimeRef}, or bind the Agent to ${spec.runtimeRef} first`,
        {
          field_violations: [
            {
              field: "spec.runtimeRef",
              description: `must be ${agent.spec.runtimeRef}, the runtime of Agent ${spec.agentRef}`,
            },
          ],
        },
      );
    const repo = spec.workspace?.repo;
    if (repo) assertRepoAdmitted(repo, agent, "spec.workspace.repo");
    await this.#assertPortsFree(namespace, spec);
    return spec;
  }

  /**
   * A declared port is never the runtime's own session port (`spec.session.port`, an
   * `openai-chat` harness's): that one answers the runner only, like the adapter's.
   */
  async #assertPortsFree(namespace: string, spec: HarnessSessionSpec): Promise<void> {
    if (!spec.ports?.length || spec.runtimeRef === undefined) return;
    const runtime = (await this.#store.getResource("AgentRuntime", namespace, spec.runtimeRef)) as
      | AgentRuntime
      | undefined;
    const own = runtime?.spec.session?.port;
    const index = own === undefined ? -1 : spec.ports.findIndex((p) => p.port === own);
    if (index < 0) return;
    throw new CodedError(
      "INVALID_ARGUMENT",
      `invalid ${HARNESS_SESSION_KIND}: spec.ports[${index}].port ${own} is the session port of AgentRuntime ${namespace}/${spec.runtimeRef}; declare another port`,
      {
        field_violations: [
          { field: `spec.ports[${index}].port`, description: "must not be the runtime's session port" },
        ],
      },
    );
  }

  /**
   * Expiry's checks (contracts/session-expiry.ts: one of ttl and expiresAt, not already past,
   * not absurdly far) and the paused tier's (400 INVALID_ARGUMENT, nothing changed): pauseAfter shorter than
   * idleTimeout when both are on; and no `desiredState: paused` or `pauseAfter` unless the runner
   * that holds the session's workspace can freeze it, or, not placed yet, one of the connected
   * runners it could be placed on can (placement then puts it on one: PAUSED_TIER_PLACEMENT).
   * Kubernetes has no freezer it could use without breaking an invariant (docs/kubernetes.md).
   */
  async #assertPausable(
    namespace: string,
    name: string,
    spec: HarnessSessionSpec,
    current: HarnessRecord | undefined,
  ): Promise<void> {
    const violations = [
      ...pauseAfterViolations(spec),
      ...expiryViolations(spec, current?.created_at ?? this.#now().toISOString(), this.#now()),
    ];
    if (violations.length > 0)
      throw new CodedError(
        "INVALID_ARGUMENT",
        `invalid ${HARNESS_SESSION_KIND}: ${violations.map((v) => `${v.field} ${v.description}`).join("; ")}`,
        { field_violations: violations },
      );
    if (!wantsPausedTier(spec)) return;
    const field = spec.desiredState === "paused" ? "spec.desiredState" : "spec.pauseAfter";
    const where = await this.#cannotFreeze(namespace, name, spec, current);
    if (where === undefined) return;
    const description = `the paused tier is refused: ${where}, and ${KUBERNETES_CANNOT_PAUSE}`;
    throw new CodedError("INVALID_ARGUMENT", `invalid ${HARNESS_SESSION_KIND}: ${field}: ${description}`, {
      field_violations: [{ field, description }],
    });
  }

  /**
   * Where the session is (or would be) that cannot freeze it; undefined when it can be frozen
   * there, or where it goes is not known yet (no connected runner it could be placed on: Pending).
   */
  async #cannotFreeze(
    namespace: string,
    name: string,
    spec: HarnessSessionSpec,
    current: HarnessRecord | undefined,
  ): Promise<string | undefined> {
    // Its workspace, or the one its provision would take up again: that runner holds it for good.
    const workspace =
      current?.container_name !== undefined
        ? await this.#store.getWorkspace(current.container_name)
        : await this.#store.findWorkspace(`${namespace}/${spec.agentRef}`, harnessWorkstream(name));
    const stored = await this.#store.listRunners();
    if (workspace) {
      // By its id exactly (findRunner looks a name up first, which another runner may carry).
      const holder = stored.find((r) => r.runner_id === workspace.runner_id);
      if (!holder || canFreeze(holder.engine)) return undefined;
      return `the session is on ${ENGINE_NAMES[holder.engine]} runner ${holder.runner_name}`;
    }
    // Not placed: the connected runners its runnerSelector matches (placement's candidates).
    const connected = this.#runners?.connectedRunners() ?? [];
    const candidates = connected.filter((r) => selectorMatches(spec.runnerSelector, r.labels));
    if (candidates.length === 0 || candidates.some((r) => canFreeze(r.engine))) return undefined;
    const selector =
      spec.runnerSelector && Object.keys(spec.runnerSelector).length > 0
        ? ` matching runnerSelector ${formatLabels(spec.runnerSelector)}`
        : "";
    return `every connected runner${selector} is a Kubernetes one (${candidates.map((r) => r.runner_name).join(", ")})`;
  }

  /** The manifest of a record, with the stack name of its workspace once it has one. */
  async #shown(record: HarnessRecord): Promise<HarnessSession> {
    const manifest = toManifest(record);
    const workspace =
      record.container_name === undefined ? undefined : await this.#store.getWorkspace(record.container_name);
    if (workspace)
      manifest.status.stackName = sessionStackName(workspace.spec.namespace, workspace.spec.name);
    return manifest;
  }

  async #existing(namespace: string, name: string): Promise<HarnessRecord> {
    const record = await this.#harness.getHarnessSession(namespace, name);
    if (!record) throw notFound(namespace, name);
    return record;
  }
}

/**
 * agentRef, runtimeRef, source and ports are fixed once set: a change is INVALID_ARGUMENT, naming
 * the field. An unset runtimeRef (a session applied before its Agent) may still be set; an unset
 * source or ports may not (a session is a fork from its creation or never; its network rules are
 * made with its ports).
 */
export function assertImmutable(previous: HarnessSessionSpec, next: HarnessSessionSpec): void {
  const text = (v: unknown) => (v === undefined ? "unset" : typeof v === "string" ? v : JSON.stringify(v));
  const changed = IMMUTABLE_SPEC_FIELDS.filter(
    (field) =>
      (previous[field] !== undefined || field === "source" || field === "ports") &&
      text(previous[field]) !== text(next[field]),
  );
  if (changed.length === 0) return;
  throw new CodedError(
    "INVALID_ARGUMENT",
    `invalid ${HARNESS_SESSION_KIND}: ${changed
      .map((f) => `spec.${f} is immutable (is ${text(previous[f])}, got ${text(next[f])})`)
      .join("; ")}; delete the session and create a new one`,
    { field_violations: changed.map((f) => ({ field: `spec.${f}`, description: "field is immutable" })) },
  );
}

function notFound(namespace: string, name: string): CodedError {
  return new CodedError("NOT_FOUND", `${HARNESS_SESSION_KIND} ${namespace}/${name} not found`);
}

const ENGINE_NAMES: Record<Engine, string> = { docker: "Docker", kubernetes: "Kubernetes" };

function canFreeze(engine: Engine): boolean {
  return (PAUSABLE_ENGINES as readonly Engine[]).includes(engine);
}

/** Why Kubernetes sessions have no paused tier (docs/kubernetes.md#no-paused-tier). */
export const KUBERNETES_CANNOT_PAUSE =
  "Kubernetes has no freezer an unprivileged runner can use: the cgroup freezer needs a privileged pod or a hostPath mount of the node's cgroup filesystem (refused by the policy pack and Pod Security restricted), and stopping the agent with SIGSTOP through exec would fail the pod's probes (the kubelet restarts it, its memory lost); the paused tier is Docker only";
