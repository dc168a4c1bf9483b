import { z } from "zod";
import { CodedError } from "../../contracts/errors.ts";
import { KeyedMutex } from "../../contracts/keyed-mutex.ts";

/** A quota's limits: one for every namespace (`*`) and/or one per namespace named. */
export type NamespaceLimits = { every?: number; byNamespace?: Record<string, number> };

/**
 * A quota setting's value: `N` (every namespace), or `ns=N,…` with `*=N` for the namespaces not
 * named (`team-a=2,*=10`). A namespace neither named nor covered by `*` has no quota.
 */
export const NamespaceLimitList = z.string().transform((text, ctx): NamespaceLimits => {
  const limits: { every?: number; byNamespace: Record<string, number> } = { byNamespace: {} };
  const items = text
    .split(",")
    .map((s) => s.trim())
    .filter(Boolean);
  for (const item of items) {
    const [namespace, count, ...rest] = item.includes("=") ? item.split("=") : ["*", item];
    const n = Number(count);
    if (
      rest.length > 0 ||
      !/^(\*|[a-z0-9]([-a-z0-9]*[a-z0-9])?)$/.test(namespace ?? "") ||
      count === undefined ||
      !/^\d+$/.test(count) ||
      !Number.isSafeInteger(n)
    ) {
      ctx.addIssue({ code: "custom", message: `"${item}" is not N, namespace=N or *=N` });
      return z.NEVER;
    }
    if (namespace === "*") limits.every = n;
    else limits.byNamespace[namespace as string] = n;
  }
  return limits;
});

export type QuotaKind = "sessions" | "warmPoolEntries" | "agentRuns" | "snapshots" | "snapshotBytes";

/** The setting that sets (and raises) each quota. */
export const QUOTA_SETTINGS: Record<QuotaKind, string> = {
  sessions: "AGENT_SESSIONS_NAMESPACE_MAX_SESSIONS",
  warmPoolEntries: "AGENT_SESSIONS_NAMESPACE_MAX_WARM_POOL_ENTRIES",
  agentRuns: "AGENT_SESSIONS_NAMESPACE_MAX_AGENT_RUNS",
  snapshots: "AGENT_SESSIONS_NAMESPACE_MAX_SNAPSHOTS",
  snapshotBytes: "AGENT_SESSIONS_NAMESPACE_MAX_SNAPSHOT_BYTES",
};

const NOUNS: Record<QuotaKind, string> = {
  sessions: "sessions",
  warmPoolEntries: "warm pool entries",
  agentRuns: "agent runs at once",
  snapshots: "session snapshots",
  snapshotBytes: "bytes of session snapshots",
};

/** What names a session for its namespace's count: one per `(agent, workstream)` workspace. */
export function sessionKey(agentRef: string, workstream: string): string {
  return `${agentRef}\u0000${workstream}`;
}

/** The session keys a namespace holds now, from one place they are kept (workspaces, HarnessSessions). */
export type SessionSource = (namespace: string) => Promise<Iterable<string>>;

/**
 * Per-namespace quotas from the operator's configuration (AGENT_SESSIONS_NAMESPACE_MAX_*):
 * sessions (every workspace — ProvisionAgentWorkspace, SpawnAgent — and every HarnessSession,
 * counted once when it holds a workspace), warm pool entries, one-shot AgentRuns at once,
 * SessionSnapshots and their bytes (a take's size is known once taken: a new one is refused when
 * the namespace's snapshots already hold the quota's bytes; an import's when its staged tar would
 * pass it). Over
 * a quota is RESOURCE_EXHAUSTED (429), naming the namespace, the quota and the setting, before
 * anything changes. Counts and reservations are this process's: several server replicas over
 * one store may each admit up to the quota at the same moment.
 */
export class NamespaceQuotas {
  readonly #limits: Partial<Record<QuotaKind, NamespaceLimits>>;
  readonly #sources: SessionSource[] = [];
  /** Session keys admitted but not yet in any source (being created), per namespace. */
  readonly #pending = new Map<string, Map<string, number>>();
  /** One count-and-reserve per namespace at a time: two admissions never both take the last place. */
  readonly #counting = new KeyedMutex();

  constructor(limits: Partial<Record<QuotaKind, NamespaceLimits>> = {}) {
    this.#limits = limits;
  }

  /** Where sessions are counted from; the union of every source's keys is the count. */
  addSessionSource(source: SessionSource): void {
    this.#sources.push(source);
  }

  /** The namespace's limit of `kind`; undefined = no quota. */
  limit(kind: QuotaKind, namespace: string): number | undefined {
    const limits = this.#limits[kind];
    return limits?.byNamespace?.[namespace] ?? limits?.every;
  }

  /** RESOURCE_EXHAUSTED when `used + adding` would pass the namespace's quota of `kind`. */
  assertRoom(kind: QuotaKind, namespace: string, used: number, adding = 1): void {
    const limit = this.limit(kind, namespace);
    if (limit !== undefined && used + adding > limit)
      throw quotaExceeded(kind, namespace, limit, used, adding);
  }

  /**
   * Admit a new session `key` in `namespace` (refused over the quota), holding its place until
   * `release` is called — by then it is in a source, or it was never made. A key already counted
   * (a HarnessSession provisioning its own workspace) takes no new place.
   */
  async reserveSession(namespace: string, key: string): Promise<() => void> {
    if (this.limit("sessions", namespace) === undefined) return () => undefined;
    return this.#counting.run(namespace, async () => {
      const keys = new Set<string>();
      for (const source of this.#sources) for (const k of await source(namespace)) keys.add(k);
      const pending = this.#pending.get(namespace) ?? new Map<string, number>();
      for (const k of pending.keys()) keys.add(k);
      if (!keys.has(key)) this.assertRoom("sessions", namespace, keys.size);
      pending.set(key, (pending.get(key) ?? 0) + 1);
      this.#pending.set(namespace, pending);
      let released = false;
      return () => {
        if (released) return;
        released = true;
        const left = (pending.get(key) ?? 1) - 1;
        if (left > 0) pending.set(key, left);
        else pending.delete(key);
        if (pending.size === 0 && this.#pending.get(namespace) === pending) this.#pending.delete(namespace);
      };
    });
  }
}

export function quotaExceeded(
  kind: QuotaKind,
  namespace: string,
  limit: number,
  used: number,
  adding = 1,
): CodedError {
  const setting = QUOTA_SETTINGS[kind];
  const state =
    used >= limit
      ? `is at its quota of ${limit} ${NOUNS[kind]} (${used} in use)`
      : `would pass its quota of ${limit} ${NOUNS[kind]} (${used} in use, ${adding} more asked)`;
  return new CodedError(
    "RESOURCE_EXHAUSTED",
    `namespace ${namespace} ${state}; free some, or raise the quota with ${setting} (e.g. ${setting}=${namespace}=${used + adding})`,
    { namespace, quota: kind, limit, used, setting },
  );
}
