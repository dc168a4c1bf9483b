import { createHash } from "node:crypto";
import type { Agent, AgentRuntime } from "../../contracts/resources.ts";
import type { GatewayGrant, RunnerCommand } from "../../contracts/runner-protocol.ts";
import type { Logger } from "../observability/log.ts";
import { gatewayFieldOf } from "./gateway-grant.ts";
import { chooseRunner } from "./placement.ts";
import type { RunnerDirectory } from "./runner-directory.ts";
import { type Admission, defaultAdmission } from "./admission.ts";
import { assertSessionRuntime, buildSessionSpec, resolveCredentials } from "./session-spec-builder.ts";
import type { RunnerRecord, Store } from "../store/store.ts";

type PoolConfig = Extract<RunnerCommand, { kind: "warm_pools" }>["pools"][number];

/** The `name` of a pool's spec template; the runner gives every entry its own. */
const TEMPLATE_NAME = "pool";

export type WarmPoolsOptions = {
  store: Store;
  runners: RunnerDirectory;
  log: Logger;
  /** Where `secretRef` credentials are read. @default {} */
  secretEnv?: Record<string, string | undefined>;
  /** How often the desired pools are sent to the runners. @default 5000 */
  intervalMs?: number;
  /** What the operator admits (egress guard). @default defaultAdmission() */
  admission?: Admission;
  /**
   * Whether this replica holds the controllers' lease: only its holder sends the runners their
   * pools (every replica still computes the assignment its claims read). @default always
   */
  leads?: () => boolean;
};

/** Where a new workspace of an Agent may be claimed from. */
export type WarmTarget = { runnerId: string; pool: string; fingerprint: string };

/**
 * The server's half of the warm pool (the design is in runner/sessions/warm-pool.ts): policy only. Every
 * `intervalMs` it computes the pools the AgentRuntimes ask for (`spec.warmPool.size` per Agent
 * bound to the runtime), assigns each pool to one connected runner (kept while it stays
 * connected) and sends every connected runner its whole set (`warm_pools`; an empty set makes a
 * runner destroy what it holds). Nothing is stored: after a server restart the next sync sends
 * the same set again, so the runners keep what they have and nothing leaks.
 */
export class WarmPools {
  readonly #store: Store;
  readonly #runners: RunnerDirectory;
  readonly #log: Logger;
  readonly #secretEnv: Record<string, string | undefined>;
  readonly #intervalMs: number;
  readonly #admission: Admission;
  readonly #leads: () => boolean;
  /** Pool → the runner holding it. */
  readonly #holders = new Map<string, string>();
  /** Runner → pool entries it keeps (the sizes of the pools it holds), as of the last sync. */
  #reserved = new Map<string, number>();
  /** Why an Agent's pool cannot be made, as last logged. */
  readonly #refusals = new Map<string, string>();
  #timer: NodeJS.Timeout | undefined;
  #syncing: Promise<void> | undefined;

  constructor(options: WarmPoolsOptions) {
    this.#store = options.store;
    this.#runners = options.runners;
    this.#log = options.log;
    this.#secretEnv = options.secretEnv ?? {};
    this.#intervalMs = options.intervalMs ?? 5_000;
    this.#admission = options.admission ?? defaultAdmission();
    this.#leads = options.leads ?? (() => true);
  }

  start(): void {
    void this.sync();
    this.#timer = setInterval(() => void this.sync(), this.#intervalMs);
    this.#timer.unref();
  }

  stop(): void {
    clearInterval(this.#timer);
  }

  /** One round: desired pools to every connected runner. Never throws (failures are logged). */
  sync(): Promise<void> {
    this.#syncing ??= this.#sync()
      .catch((error: unknown) => this.#log("error", "warm pool sync failed", { error: String(error) }))
      .finally(() => {
        this.#syncing = undefined;
      });
    return this.#syncing;
  }

  /**
   * The pool a new workspace of `agent` may claim from: its runtime asks for a pool and the pool
   * is assigned to a connected runner. The fingerprint is of the Agent and runtime as they are
   * now, so an entry made from an older version is never claimed.
   */
  async target(agent: Agent, runtime: AgentRuntime): Promise<WarmTarget | undefined> {
    if ((runtime.spec.warmPool?.size ?? 0) === 0 || hasMcpServers(agent)) return undefined;
    const pool = poolKey(agent);
    const runner = this.#runners.connectedRunners().find((r) => r.runner_id === this.#holders.get(pool));
    if (!runner) return undefined;
    const config = this.#config(agent, runtime, runner);
    return config ? { runnerId: runner.runner_id, pool, fingerprint: config.fingerprint } : undefined;
  }

  /**
   * Pool entries per runner: they hold a place of the runner's capacity like workspaces do, so
   * placement counts them (workspaces.ts) and a pool goes only where all its entries fit.
   */
  reservedByRunner(): ReadonlyMap<string, number> {
    return this.#reserved;
  }

  async #sync(): Promise<void> {
    const connected = this.#runners.connectedRunners();
    if (connected.length === 0) return;
    const workspaces = await this.#store.countWorkspacesByRunner();
    const runtimes = new Map<string, AgentRuntime>();
    for (const r of (await this.#store.listResources("AgentRuntime", undefined)) as AgentRuntime[])
      if ((r.spec.warmPool?.size ?? 0) > 0) runtimes.set(`${r.metadata.namespace}/${r.metadata.name}`, r);
    const byRunner = new Map<string, PoolConfig[]>(connected.map((r) => [r.runner_id, []]));
    for (const [pool, runnerId] of this.#holders) if (!byRunner.has(runnerId)) this.#holders.delete(pool);
    // A runner's load: its workspaces and the entries of the pools it keeps.
    const load = new Map(workspaces);
    const reserved = new Map<string, number>();
    const reserve = (runnerId: string, size: number) => {
      load.set(runnerId, (load.get(runnerId) ?? 0) + size);
      reserved.set(runnerId, (reserved.get(runnerId) ?? 0) + size);
    };
    const wanted = new Set<string>();
    /** Entries given to each namespace's pools so far this round (its warm pool quota). */
    const entriesOf = new Map<string, number>();
    for (const agent of (await this.#store.listResources("Agent", undefined)) as Agent[]) {
      const runtime = runtimes.get(`${agent.metadata.namespace}/${agent.spec.runtimeRef}`);
      if (!runtime || hasMcpServers(agent)) continue;
      const pool = poolKey(agent);
      const size = this.#withinQuota(agent, runtime.spec.warmPool?.size ?? 0, entriesOf);
      if (size === 0) continue;
      let runnerId = this.#holders.get(pool);
      if (runnerId === undefined) {
        // A new pool goes only to a runner with room for all its entries.
        const fits = connected.filter((r) => r.capacity - (load.get(r.runner_id) ?? 0) >= size);
        const placement = chooseRunner(fits, load);
        if (!placement.ok) {
          this.#refuse(pool, `no connected runner has room for ${size} warm pool entries`);
          continue;
        }
        runnerId = placement.runner.runner_id;
      }
      const runner = connected.find((r) => r.runner_id === runnerId);
      const found = runner ? this.#config(agent, runtime, runner) : undefined;
      if (!found) continue;
      const config = { ...found, size };
      const namespace = agent.metadata.namespace;
      entriesOf.set(namespace, (entriesOf.get(namespace) ?? 0) + size);
      this.#holders.set(pool, runnerId);
      reserve(runnerId, size);
      wanted.add(pool);
      byRunner.get(runnerId)?.push(config);
    }
    for (const pool of this.#holders.keys()) if (!wanted.has(pool)) this.#holders.delete(pool);
    this.#reserved = reserved;
    if (!this.#leads()) return;
    await Promise.all(
      [...byRunner].map(async ([runnerId, pools]) => {
        const outcome = await this.#runners.command(runnerId, { kind: "warm_pools", pools });
        if (!outcome.ok)
          this.#log("warn", "runner refused its warm pools", {
            runner_id: runnerId,
            code: outcome.error.code,
            message: outcome.error.message,
          });
      }),
    );
  }

  /**
   * A pool's size within its namespace's warm pool quota: pools written before the quota was set
   * (or lowered) get what is left, in the order the store lists the Agents, and the cut is logged.
   */
  #withinQuota(agent: Agent, size: number, entriesOf: Map<string, number>): number {
    const namespace = agent.metadata.namespace;
    const limit = this.#admission.quotas?.limit("warmPoolEntries", namespace);
    if (limit === undefined) return size;
    const allowed = Math.max(0, Math.min(size, limit - (entriesOf.get(namespace) ?? 0)));
    if (allowed < size)
      this.#refuse(
        poolKey(agent),
        `namespace ${namespace} is at its quota of ${limit} warm pool entries (AGENT_SESSIONS_NAMESPACE_MAX_WARM_POOL_ENTRIES): the pool keeps ${allowed} of ${size}`,
      );
    return allowed;
  }

  /** The pool of an Agent as its runner gets it; undefined when the Agent cannot have sessions. */
  #config(agent: Agent, runtime: AgentRuntime, runner: RunnerRecord): PoolConfig | undefined {
    // Skills are mounted when a workspace is made (issue 39): a pool entry made ahead would lack
    // them, so an Agent with skills has no pool and its workspaces take the ordinary path.
    if ((agent.spec.skills ?? []).length > 0) return undefined;
    try {
      assertSessionRuntime(runtime, this.#admission);
      const template = buildSessionSpec({
        namespace: agent.metadata.namespace,
        name: TEMPLATE_NAME,
        engine: runner.engine,
        agent,
        runtime,
        admission: this.#admission,
      });
      const credentials = resolveCredentials(agent, this.#secretEnv);
      const gateway = gatewayFieldOf(agent);
      return {
        pool: poolKey(agent),
        size: runtime.spec.warmPool?.size ?? 0,
        fingerprint: fingerprintOf(template, credentials, gateway.gateway),
        template,
        credentials,
        ...gateway,
      };
    } catch (error) {
      this.#refuse(poolKey(agent), String((error as Error).message ?? error));
      return undefined;
    }
  }

  /** Why a pool is not kept, said once per cause, not every sync round. */
  #refuse(pool: string, message: string): void {
    if (this.#refusals.get(pool) === message) return;
    this.#refusals.set(pool, message);
    this.#log("warn", "no warm pool for agent", { agent: pool, error: message });
  }
}

/** Warm pool entries a namespace's AgentRuntimes ask for: each one's size for every Agent bound to it. */
export function warmPoolEntries(agents: readonly Agent[], runtimes: readonly AgentRuntime[]): number {
  const sizes = new Map(runtimes.map((r) => [r.metadata.name, r.spec.warmPool?.size ?? 0]));
  return agents.reduce((n, agent) => n + (sizes.get(agent.spec.runtimeRef) ?? 0), 0);
}

/** One pool per Agent: `<namespace>/<agent>`. */
export function poolKey(agent: Agent): string {
  return `${agent.metadata.namespace}/${agent.metadata.name}`;
}

/**
 * What an entry is made of (spec template, credentials and the gateway grant), as a hash: never
 * the secrets themselves. An entry made under another grant (endpoint, allowed models, budgets)
 * is not claimed: its gateway route would enforce the old one. No grant hashes as before it existed.
 */
export function fingerprintOf(
  template: unknown,
  credentials: Record<string, string>,
  gateway?: GatewayGrant,
): string {
  const sorted = Object.fromEntries(Object.entries(credentials).sort(([a], [b]) => a.localeCompare(b)));
  return createHash("sha256")
    .update(JSON.stringify(gateway === undefined ? [template, sorted] : [template, sorted, gateway]))
    .digest("hex");
}

/**
 * An Agent binding MCP servers gets no warm pool (yet): its grants are resolved at each provision
 * (proxy/lifecycle/mcp-servers.ts), and a pool entry would hold them from before.
 */
function hasMcpServers(agent: Agent): boolean {
  return (agent.spec.mcpServers?.length ?? 0) > 0;
}
