/**
 * Whole heartbeat intervals elapsed since a runner last spoke (any message counts, not only
 * `pong`). The hub ends a link at 2 (PROTOCOL.md §4).
 */
export function missedHeartbeats(lastSeenAt: number, now: number, intervalMs: number): number {
  return Math.max(0, Math.floor((now - lastSeenAt) / intervalMs));
}
