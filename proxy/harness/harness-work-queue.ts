import { KeyedMutex } from "../../contracts/keyed-mutex.ts";
import type { KeyedLock } from "../lifecycle/keyed-mutex.ts";
import type { Logger } from "../observability/log.ts";

/** Why a session is reconciled again later: a restart's back-off, or a failed relay-path probe. */
export type LaterReason = "restart" | "reprobe";

/**
 * The HarnessSessions' work queue, in this process: one task per session at a time (in arrival
 * order), reconciles coalesced (a session already queued is not queued twice), and reconciles
 * scheduled for later (one pending timer per session and reason). Deciding what a reconcile does
 * is the reconciler's (harness-reconciler.ts).
 */
export class HarnessWorkQueue {
  readonly #reconcile: (namespace: string, name: string) => Promise<void>;
  readonly #log: Logger;
  readonly #mutex: KeyedLock;
  readonly #queued = new Set<string>();
  readonly #timers: Record<LaterReason, Map<string, NodeJS.Timeout>> = {
    /** Sessions waiting for their back-off before a restart after an unexpected exit. */
    restart: new Map(),
    /** Sessions whose relay-path probe failed, to be reconciled (probed) again soon. */
    reprobe: new Map(),
  };
  #closed = false;

  /** `lock`: one task per session across server replicas too. @default a KeyedMutex (this process) */
  constructor(
    reconcile: (namespace: string, name: string) => Promise<void>,
    log: Logger,
    lock: KeyedLock = new KeyedMutex(),
  ) {
    this.#reconcile = reconcile;
    this.#log = log;
    this.#mutex = lock;
  }

  /** Schedule a reconcile of one session (coalesced). Never throws: failures are logged. */
  enqueue(namespace: string, name: string): void {
    const key = keyOf(namespace, name);
    if (this.#queued.has(key)) return;
    this.#queued.add(key);
    this.#mutex
      .run(key, async () => {
        this.#queued.delete(key);
        await this.#reconcile(namespace, name);
      })
      .catch((error: unknown) =>
        this.#log("error", "harness session reconcile failed", { namespace, name, error: String(error) }),
      );
  }

  /** Runs `fn` for one session once no other task of that session runs (serialized with reconciles). */
  run<T>(namespace: string, name: string, fn: () => Promise<T>): Promise<T> {
    return this.#mutex.run(keyOf(namespace, name), fn);
  }

  /** Enqueue the session after `delayMs` (unless one is already pending for `reason`, or closed). */
  later(reason: LaterReason, namespace: string, name: string, delayMs: number): void {
    const key = keyOf(namespace, name);
    const timers = this.#timers[reason];
    if (this.#closed || timers.has(key)) return;
    const timer = setTimeout(() => {
      timers.delete(key);
      if (!this.#closed) this.enqueue(namespace, name);
    }, delayMs);
    timer.unref();
    timers.set(key, timer);
  }

  /** No more scheduled reconciles (server shutdown). */
  close(): void {
    this.#closed = true;
    for (const timers of Object.values(this.#timers)) {
      for (const timer of timers.values()) clearTimeout(timer);
      timers.clear();
    }
  }
}

/** One session's key in the queue (and in the controller's in-process maps). */
export function keyOf(namespace: string, name: string): string {
  return `${namespace}/${name}`;
}
