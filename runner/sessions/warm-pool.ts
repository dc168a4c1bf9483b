/**
 * The warm pool (issue 8): workspaces provisioned ahead, so a new workspace is a claim instead of
 * a Pulumi `up` (~6-10 s on Docker).
 *
 * Design
 * - Policy on the server, engine work on the runner. An AgentRuntime declares
 *   `spec.warmPool.size`; the server (proxy/lifecycle/warm-pools.ts) turns that into this runner's whole
 *   desired set, `warm_pools` (sent every sync interval, so a server restart or a deleted
 *   runtime converges), and the runner keeps that many *unclaimed* entries per pool, filling
 *   them one at a time in the background.
 * - One pool per Agent bound to such a runtime (key `<namespace>/<agent>`), not one per runtime:
 *   what a workspace is made of depends on the Agent — its credentials are container env, its
 *   egress rules are the session network, its model URL is adapter env — all fixed at `up`.
 *   Binding them at claim time would mean re-creating the container and network (Pulumi again).
 *   So an entry is provisioned for one account from the start and can only ever go to it:
 *   "never shared between accounts" holds by construction. A `fingerprint` (hash of the spec
 *   template and credentials) marks entries made from an older Agent/runtime: they are
 *   destroyed, never handed out.
 * - An entry is an ordinary session stack with its own name, `pool-<agent>-<12 hex>` (container
 *   `as-<ns>-pool-…`, stack `<ns>--pool-…`), its own fresh volume and its own adapter token
 *   generated here. The stack is never renamed: on claim the server records the workspace under
 *   the container name and spec the runner returns (nothing re-derives a workspace's name from
 *   the agent and workstream: the record's `container_name` and `spec.name` are what stop,
 *   resume and delete use), so from then on it is a workspace like any other — scale_down,
 *   re-provision and `remove` (destroy + stack rm) act on it unchanged.
 * - Claim → READY without Pulumi and without an exec: the agent is pre-started in each entry
 *   (AgentSessions.prestart) once the adapter is up; a claim takes an entry out of the pool
 *   (synchronously: never twice), and the session's `start` adopts the running agent, replaying
 *   the frames it held, and answers READY at once.
 * - Clean on claim: an entry's volume was created for it and never used; nothing can reach an
 *   unclaimed entry (no session may start in it — `start` is refused —, no relay: its token is not
 *   in the runner's relay table until claimed); its agent has received no input. A claim checks
 *   its agent still runs (else the entry is destroyed and the next one tried). Claimed entries
 *   never return to the pool: a removed workspace is destroyed, a new one claims a new entry.
 * - No leaks: unclaimed entries are listed in `<data-dir>/warm-pool.json` before their stack is
 *   created; a runner that starts again destroys the ones listed (their agents died with the
 *   previous process) and refills. Pools the server no longer lists are destroyed.
 */
import { randomBytes } from "node:crypto";
import { readFileSync, renameSync, writeFileSync } from "node:fs";
import { CodedError } from "../../contracts/errors.ts";
import type { Logger } from "../../contracts/log.ts";
import type { GatewayGrant, RunnerCommand } from "../../contracts/runner-protocol.ts";
import { type SessionSpec, workloadName } from "../../contracts/session-spec.ts";
import type { EngineDriver } from "../engine/driver.ts";

export type WarmPoolConfig = Extract<RunnerCommand, { kind: "warm_pools" }>["pools"][number];

/** One provisioned, unclaimed workspace with its agent pre-started. */
export type WarmEntry = {
  pool: string;
  fingerprint: string;
  containerName: string;
  spec: SessionSpec;
  adapterToken: string;
  endpoint: string;
  resolvedImageDigest: string;
};

/** What the pool needs of the session set (AgentSessions). */
export interface PrestartedAgents {
  /** `command`: the runtime's agent command (absent: the reference agent). */
  prestart(containerName: string, command?: string[]): Promise<void>;
  hasWarm(containerName: string): boolean;
  discardWarm(containerName: string): Promise<void>;
}

export type WarmPoolOptions = {
  /** Provisions with the Agent's credentials and its gateway grant: the runner gives the entry gateway tokens instead (runner/gateway/session-gateway.ts). */
  driver: {
    provision(
      containerName: string,
      spec: SessionSpec,
      secrets: { credentials: Record<string, string>; adapterToken: string; gateway?: GatewayGrant },
    ): ReturnType<EngineDriver["provision"]>;
    remove: EngineDriver["remove"];
  };
  agents: PrestartedAgents;
  log: Logger;
  /** Where unclaimed entries are listed (a restart destroys them). */
  stateFile: string;
  /** Wait after a failed fill before that pool is tried again. @default 5000 */
  retryMs?: number;
};

export const WARM_POOL_FILE_NAME = "warm-pool.json";

export class WarmPool {
  readonly #o: Required<WarmPoolOptions>;
  #desired = new Map<string, WarmPoolConfig>();
  /** Ready entries, oldest first. */
  readonly #ready: WarmEntry[] = [];
  /** Entries being provisioned or destroyed (not claimable). */
  readonly #busy = new Map<string, { pool: string; fingerprint: string }>();
  /** Entries of a previous run to destroy. */
  #leftovers: string[] = [];
  /** No fill of a pool before this time (after a failure). */
  readonly #retryAt = new Map<string, number>();
  #loop: Promise<void> | undefined;
  #again = false;
  #stopped = false;

  constructor(options: WarmPoolOptions) {
    this.#o = { retryMs: 5_000, ...options };
  }

  /** Destroys the unclaimed entries a previous run left (in the background). */
  start(): void {
    this.#leftovers = this.#load();
    if (this.#leftovers.length > 0)
      this.#o.log("info", "warm pool: destroying entries of a previous run", {
        count: this.#leftovers.length,
      });
    this.#kick();
  }

  stop(): void {
    this.#stopped = true;
  }

  /** The server's whole desired set; answers the ready counts now and converges in the background. */
  configure(pools: WarmPoolConfig[]): Record<string, number> {
    this.#desired = new Map(pools.map((p) => [p.pool, p]));
    this.#kick();
    return this.readyCounts();
  }

  readyCounts(): Record<string, number> {
    const counts: Record<string, number> = {};
    for (const p of this.#desired.keys()) counts[p] = 0;
    for (const e of this.#ready) counts[e.pool] = (counts[e.pool] ?? 0) + 1;
    return counts;
  }

  /** True for a workspace of this pool nobody claimed (no session may start in it). */
  isUnclaimed(containerName: string): boolean {
    return this.#busy.has(containerName) || this.#ready.some((e) => e.containerName === containerName);
  }

  /**
   * Takes one ready entry of `pool` made from `fingerprint`, whose agent still runs; it leaves
   * the pool for good. NOT_FOUND when there is none (the caller provisions the slow way).
   */
  /**
   * Whether an entry may still be handed out: its pre-started agent runs. An openai-chat runtime's
   * entry (`spec.session`) has none: it counts as alive, and a start in a workload that died
   * meanwhile answers NOT_FOUND (runner/sessions/agent-sessions.ts, mode none).
   */
  #alive(entry: { containerName: string; spec: SessionSpec }): boolean {
    return entry.spec.session !== undefined || this.#o.agents.hasWarm(entry.containerName);
  }

  claim(pool: string, fingerprint: string): WarmEntry {
    for (;;) {
      const index = this.#ready.findIndex((e) => e.pool === pool && e.fingerprint === fingerprint);
      if (index < 0) {
        this.#kick();
        throw new CodedError("NOT_FOUND", `no warm workspace of pool ${pool} is ready`);
      }
      const [entry] = this.#ready.splice(index, 1);
      if (!entry) continue;
      if (!this.#alive(entry)) {
        // Its agent (or container) died while it waited: never hand that out.
        this.#o.log("warn", "warm pool: entry lost its agent; destroying it", {
          container: entry.containerName,
        });
        this.#busy.set(entry.containerName, { pool, fingerprint });
        this.#leftovers.push(entry.containerName);
        continue;
      }
      this.#save();
      this.#kick(); // refill
      this.#o.log("info", "warm pool: entry claimed", { pool, container: entry.containerName });
      return entry;
    }
  }

  /** Runs the convergence loop unless it runs already (then once more after it). */
  #kick(): void {
    if (this.#stopped) return;
    if (this.#loop) {
      this.#again = true;
      return;
    }
    this.#loop = (async () => {
      do {
        this.#again = false;
        try {
          while (!this.#stopped && (await this.#step()));
        } catch (error) {
          this.#o.log("error", "warm pool step failed", { error: String(error) });
        }
      } while (this.#again && !this.#stopped);
      this.#loop = undefined;
    })();
  }

  /** Idle until the current convergence is done (tests). */
  async settled(): Promise<void> {
    while (this.#loop) await this.#loop;
  }

  /** One unit of work: destroy something unwanted, else provision one missing entry. False: nothing to do. */
  async #step(): Promise<boolean> {
    const leftover = this.#leftovers.shift();
    if (leftover !== undefined) {
      await this.#destroy(leftover);
      return true;
    }
    const unwanted = this.#ready.find((e) => {
      const want = this.#desired.get(e.pool);
      return (
        !want ||
        want.fingerprint !== e.fingerprint ||
        !this.#alive(e) ||
        this.#ready.filter((r) => r.pool === e.pool).length > want.size
      );
    });
    if (unwanted) {
      this.#ready.splice(this.#ready.indexOf(unwanted), 1);
      this.#busy.set(unwanted.containerName, unwanted);
      await this.#destroy(unwanted.containerName);
      return true;
    }
    const now = Date.now();
    const short = [...this.#desired.values()].find((want) => {
      if ((this.#retryAt.get(want.pool) ?? 0) > now) return false;
      const have = this.#ready.filter((e) => e.pool === want.pool && e.fingerprint === want.fingerprint);
      const coming = [...this.#busy.values()].filter(
        (b) => b.pool === want.pool && b.fingerprint === want.fingerprint,
      );
      return have.length + coming.length < want.size;
    });
    if (short) {
      await this.#fill(short);
      return true;
    }
    const next = Math.min(...[...this.#retryAt.values()].filter((t) => t > now));
    if (Number.isFinite(next)) setTimeout(() => this.#kick(), next - now + 10).unref();
    return false;
  }

  async #fill(want: WarmPoolConfig): Promise<void> {
    const name = entryName(want.pool);
    const spec: SessionSpec = { ...want.template, name, replicas: 1 };
    const containerName = workloadName(spec.namespace, name);
    const adapterToken = randomBytes(32).toString("base64url");
    this.#busy.set(containerName, { pool: want.pool, fingerprint: want.fingerprint });
    this.#save(); // listed before anything exists, so a crash from here on leaks nothing
    const started = Date.now();
    try {
      const r = await this.#o.driver.provision(containerName, spec, {
        credentials: want.credentials,
        adapterToken,
        ...(want.gateway ? { gateway: want.gateway } : {}),
      });
      // An openai-chat runtime (spec.session) has no agent to start ahead: its workload is all of it.
      if (!spec.session) await this.#o.agents.prestart(containerName, spec.agentCommand);
      this.#busy.delete(containerName);
      this.#ready.push({
        pool: want.pool,
        fingerprint: want.fingerprint,
        containerName,
        spec,
        adapterToken,
        endpoint: r.endpoint,
        resolvedImageDigest: r.resolvedImageDigest,
      });
      this.#retryAt.delete(want.pool);
      this.#save();
      this.#o.log("info", "warm pool: entry ready", {
        pool: want.pool,
        container: containerName,
        ms: Date.now() - started,
      });
    } catch (error) {
      this.#o.log("warn", "warm pool: provisioning an entry failed", {
        pool: want.pool,
        container: containerName,
        error: String((error as Error).message ?? error),
      });
      this.#retryAt.set(want.pool, Date.now() + this.#o.retryMs);
      await this.#destroy(containerName);
    }
  }

  async #destroy(containerName: string): Promise<void> {
    this.#busy.set(containerName, this.#busy.get(containerName) ?? { pool: "", fingerprint: "" });
    try {
      await this.#o.agents.discardWarm(containerName);
      await this.#o.driver.remove(containerName);
      this.#busy.delete(containerName);
    } catch (error) {
      this.#o.log("error", "warm pool: destroying an entry failed; retrying later", {
        container: containerName,
        error: String((error as Error).message ?? error),
      });
      this.#busy.delete(containerName);
      setTimeout(() => {
        this.#leftovers.push(containerName);
        this.#kick();
      }, this.#o.retryMs).unref();
    }
    this.#save();
  }

  /** Unclaimed entries (ready, coming, going) and leftovers, so a restart can destroy them. */
  #save(): void {
    const names = [
      ...new Set([...this.#ready.map((e) => e.containerName), ...this.#busy.keys(), ...this.#leftovers]),
    ];
    const tmp = `${this.#o.stateFile}.tmp`;
    writeFileSync(tmp, JSON.stringify({ unclaimed: names }), { mode: 0o600 });
    renameSync(tmp, this.#o.stateFile);
  }

  #load(): string[] {
    try {
      const parsed = JSON.parse(readFileSync(this.#o.stateFile, "utf8")) as { unclaimed?: unknown };
      return Array.isArray(parsed.unclaimed)
        ? parsed.unclaimed.filter((n): n is string => typeof n === "string")
        : [];
    } catch {
      return [];
    }
  }
}

/**
 * `pool-<agent>-<12 hex>`: a DNS label, readable, random (a new entry never reuses a name whose
 * stack may be on its way out). Ordinary workspace names end in `-<8 hex>` after their stem, so
 * the two never coincide.
 */
export function entryName(pool: string): string {
  const agent = (pool.split("/")[1] ?? pool)
    .replace(/[^a-z0-9-]/g, "")
    .replace(/-+/g, "-")
    .replace(/^-+|-+$/g, "");
  const suffix = randomBytes(6).toString("hex");
  const room = 63 - "pool-".length - 1 - suffix.length;
  const head = agent.slice(0, room).replace(/-+$/, "");
  return head ? `pool-${head}-${suffix}` : `pool-${suffix}`;
}
