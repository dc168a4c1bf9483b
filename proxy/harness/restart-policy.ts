/**
 * When a HarnessSession whose workload or agent exited unexpectedly is restarted, and when it has
 * crashed too often to go on (CrashLoop). The controller asks; this module only decides.
 *
 * Like a kubelet's CrashLoopBackOff: the first restart (counted since the session last ran
 * undisturbed for `resetAfterMs`) is at once, restart n > 1 waits `backoffMs · 2^(n-2)`, capped at
 * `maxBackoffMs`; the restart after
 * `maxRestarts` such restarts is refused and the session is Failed/CrashLoop until its spec is
 * written again.
 */
export type RestartPolicy = {
  /** The second restart's delay (the first is at once), doubled for each one after. @default 1000 */
  backoffMs: number;
  /** The longest delay. @default 60000 */
  maxBackoffMs: number;
  /**
   * Restarts in a row (none separated by `resetAfterMs` of running) before CrashLoop. 0: never
   * restarted (an exit leaves the session Failed with the exit's reason, e.g. AdapterExited).
   * @default 5
   */
  maxRestarts: number;
  /** Running this long since the last restart forgets the earlier ones. @default 600000 */
  resetAfterMs: number;
};

/** What the record says of earlier restarts. */
export type RestartHistory = {
  /** Restarts in a row so far. */
  consecutive: number;
  /** When the latest restart was due (ISO), if any. */
  lastRestartAt: string | undefined;
};

export type RestartDecision =
  | { action: "restart"; delayMs: number; consecutive: number; restartAt: string }
  | { action: "crashLoop"; consecutive: number };

/** The decision for an exit seen at `now`. */
export function decideRestart(policy: RestartPolicy, history: RestartHistory, now: Date): RestartDecision {
  const last = history.lastRestartAt === undefined ? Number.NaN : Date.parse(history.lastRestartAt);
  const ranUndisturbed = Number.isNaN(last) || now.getTime() - last >= policy.resetAfterMs;
  const previous = ranUndisturbed ? 0 : history.consecutive;
  if (previous >= policy.maxRestarts) return { action: "crashLoop", consecutive: previous };
  const consecutive = previous + 1;
  // One crash in a while is healed at once; only a crash that follows a restart backs off.
  const delayMs =
    consecutive === 1 ? 0 : Math.min(policy.maxBackoffMs, policy.backoffMs * 2 ** (consecutive - 2));
  return {
    action: "restart",
    delayMs,
    consecutive,
    restartAt: new Date(now.getTime() + delayMs).toISOString(),
  };
}
