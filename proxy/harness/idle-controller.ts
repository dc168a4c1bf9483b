import { parseDuration } from "../../contracts/duration.ts";
import { expiryOf } from "../../contracts/session-expiry.ts";
import type { HarnessController } from "./harness-controller.ts";
import type { Logger } from "../observability/log.ts";
import type { HarnessRecord, HarnessStore } from "../store/harness-store.ts";

export type IdleControllerOptions = {
  harness: HarnessStore;
  controller: Pick<HarnessController, "idleStop" | "pause" | "resync">;
  /**
   * Delete a session whose spec.ttl or spec.expiresAt was reached (HarnessSessions.expire, which
   * checks again); false when it did not. @default none: expiry is not swept
   */
  expire?: (namespace: string, name: string) => Promise<boolean>;
  log: Logger;
  /** How often idleness is checked. @default 1000 */
  intervalMs?: number;
  /**
   * A request in flight for longer than this is settled as failed: it must be a bound above the
   * proxy's request timeout, so only a request whose relay crashed is ever cleared.
   * @default 180000
   */
  staleRequestMs?: number;
  /** How often unsettled sessions (Pending, Draining, unobserved spec) are reconciled again. @default 10000 */
  resyncMs?: number;
  /** How often sessions with an expiry are looked at (an expiry is late by up to this). @default 2000 */
  expiryMs?: number;
  /** @default () => new Date() */
  now?: () => Date;
  /** Told how long each sweep (one `tick`) took, in seconds, when it ends (the metrics hook). */
  onSweep?: (seconds: number) => void;
  /**
   * Whether this replica holds the controllers' lease (proxy/cluster/): replicas without it
   * skip their sweeps. @default always
   */
  leads?: () => boolean;
};

/**
 * When a Ready (or Paused) session has had no activity for its `idleTimeout` and nothing is in
 * flight, it is stopped and its stack scaled to 0 (volume kept): Ready=False, reason IdleTimeout.
 * A Ready one idle for its `pauseAfter` (or desired paused) is paused: its workload frozen with
 * all its memory, phase Paused. Also
 * clears in-flight counts older than `staleRequestMs` (so one crash cannot block idleness
 * forever), and resyncs unsettled sessions (retries after transient failures).
 */
export class IdleController {
  readonly #o: Required<Omit<IdleControllerOptions, "onSweep" | "expire">> &
    Pick<IdleControllerOptions, "onSweep" | "expire">;
  #timer: NodeJS.Timeout | undefined;
  #running: Promise<void> | undefined;
  #lastResync = 0;
  #lastExpiry = 0;
  /** Expiries under way (a delete takes a while; the next sweeps must not start it again). */
  readonly #expiring = new Set<string>();

  constructor(options: IdleControllerOptions) {
    this.#o = {
      intervalMs: 1_000,
      staleRequestMs: 180_000,
      resyncMs: 10_000,
      expiryMs: 2_000,
      now: () => new Date(),
      leads: () => true,
      ...options,
    };
  }

  start(): void {
    this.#timer ??= setInterval(() => {
      if (this.#running || !this.#o.leads()) return; // one tick at a time, on the lease holder
      this.#running = this.tick()
        .catch((error: unknown) =>
          this.#o.log("error", "idle controller tick failed", { error: String(error) }),
        )
        .finally(() => {
          this.#running = undefined;
        });
    }, this.#o.intervalMs);
  }

  async stop(): Promise<void> {
    clearInterval(this.#timer);
    this.#timer = undefined;
    await this.#running;
  }

  async tick(): Promise<void> {
    const started = performance.now();
    try {
      await this.#sweep();
    } finally {
      this.#o.onSweep?.((performance.now() - started) / 1000);
    }
  }

  async #sweep(): Promise<void> {
    const now = this.#o.now();
    const reaped = await this.#o.harness.reapStaleRequests(
      new Date(now.getTime() - this.#o.staleRequestMs).toISOString(),
      now.toISOString(),
    );
    if (reaped > 0) this.#o.log("warn", "cleared requests in flight for too long", { count: reaped });
    const cutoffFor = (idleTimeout: string) => {
      const timeoutMs = parseDuration(idleTimeout);
      return timeoutMs ? new Date(now.getTime() - timeoutMs).toISOString() : undefined;
    };
    const seen = new Set<string>();
    for (const record of await this.#o.harness.listIdleCandidates(cutoffFor)) {
      const key = `${record.namespace}/${record.name}`;
      if (seen.has(key)) continue; // a candidate by idleTimeout and by pauseAfter
      seen.add(key);
      const next = idleAction(record, now);
      if (next === undefined) continue;
      // Fire and forget: a stop takes a while, and other sessions' idleness must not wait for it.
      const done =
        next.action === "stop"
          ? this.#o.controller.idleStop(record.namespace, record.name, next.cutoff)
          : this.#o.controller.pause(record.namespace, record.name, { cutoff: next.cutoff, why: next.why });
      done.catch((error: unknown) =>
        this.#o.log("error", `idle ${next.action} failed`, {
          namespace: record.namespace,
          name: record.name,
          error: String(error),
        }),
      );
    }
    if (this.#o.expire && now.getTime() - this.#lastExpiry >= this.#o.expiryMs) {
      this.#lastExpiry = now.getTime();
      await this.#sweepExpiry(now, this.#o.expire);
    }
    if (now.getTime() - this.#lastResync >= this.#o.resyncMs) {
      this.#lastResync = now.getTime();
      await this.#o.controller.resync(true);
    }
  }

  /** Sessions past their expiry are deleted, each once, in the background. */
  async #sweepExpiry(
    now: Date,
    expire: (namespace: string, name: string) => Promise<boolean>,
  ): Promise<void> {
    for (const candidate of await this.#o.harness.listExpiryCandidates()) {
      const end = expiryOf(candidate.spec, candidate.created_at);
      if (end === undefined || Date.parse(end) > now.getTime()) continue;
      const key = `${candidate.namespace}/${candidate.name}`;
      if (this.#expiring.has(key)) continue;
      this.#expiring.add(key);
      this.#o.log("info", "harness session expired; deleting", {
        namespace: candidate.namespace,
        name: candidate.name,
        expiresAt: end,
      });
      expire(candidate.namespace, candidate.name)
        .catch((error: unknown) =>
          this.#o.log("error", "deleting an expired session failed", {
            namespace: candidate.namespace,
            name: candidate.name,
            error: String(error),
          }),
        )
        .finally(() => this.#expiring.delete(key));
    }
  }
}

type IdleRecord = Pick<
  HarnessRecord,
  "phase" | "spec" | "active_requests" | "last_activity_time" | "deletion_requested_at"
>;

/**
 * The latest last-activity time at which the session counts as idle at `now`, when it may be
 * stopped for idleness at all: Ready or Paused (idleTimeout counts from the last activity, from
 * Paused too), not desired stopped, not being deleted, an idle timeout set, nothing in flight and
 * idle for at least the timeout. Undefined otherwise. Pure.
 */
export function idleCutoff(record: IdleRecord, now: Date): string | undefined {
  if (record.phase !== "Ready" && record.phase !== "Paused") return undefined;
  if (record.spec.desiredState === "stopped") return undefined;
  return cutoffOf(record, record.spec.idleTimeout, now);
}

/**
 * The paused tier's cutoff: a Ready session with `pauseAfter` set (or desired paused: at once)
 * and nothing in flight since the cutoff is paused. Undefined when it is not to be paused. Pure.
 */
export function pauseCutoff(record: IdleRecord, now: Date): string | undefined {
  if (record.phase !== "Ready" || record.spec.desiredState === "stopped") return undefined;
  if (record.spec.desiredState === "paused" && !parseDuration(record.spec.pauseAfter ?? "0"))
    return record.deletion_requested_at === undefined && record.active_requests === 0
      ? now.toISOString()
      : undefined;
  return cutoffOf(record, record.spec.pauseAfter ?? "0", now);
}

/** What the idle sweep does to a session at `now`: stop it (idleTimeout) before pausing it (pauseAfter). Pure. */
export function idleAction(
  record: IdleRecord,
  now: Date,
): { action: "stop" | "pause"; cutoff: string; why: string } | undefined {
  const stop = idleCutoff(record, now);
  if (stop !== undefined)
    return { action: "stop", cutoff: stop, why: `idleTimeout ${record.spec.idleTimeout}` };
  const pause = pauseCutoff(record, now);
  if (pause === undefined) return undefined;
  return {
    action: "pause",
    cutoff: pause,
    why:
      record.spec.pauseAfter !== undefined && parseDuration(record.spec.pauseAfter)
        ? `no activity for ${record.spec.pauseAfter} (spec.pauseAfter)`
        : "desiredState: paused",
  };
}

function cutoffOf(record: IdleRecord, duration: string, now: Date): string | undefined {
  if (record.deletion_requested_at !== undefined || record.active_requests > 0) return undefined;
  const timeoutMs = parseDuration(duration);
  if (!timeoutMs) return undefined; // 0: never
  const cutoff = new Date(now.getTime() - timeoutMs).toISOString();
  if (record.last_activity_time !== undefined && record.last_activity_time > cutoff) return undefined;
  return cutoff;
}
