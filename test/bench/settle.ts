/**
 * The "settled" mode of the session benchmarks: wait until the runner's background recordings
 * (the fast path's `pulumi up` of the declared state, stacks/recording.ts) have finished, so the
 * next operation is measured on its own. Back to back (no wait) is what a user does.
 */
import { join } from "node:path";
import { pendingRecordings } from "../../stacks/recording.ts";
import type { System } from "../support/system.ts";

/** Waits for the runner's pending recordings to finish; ms waited. */
export async function settled(system: System, timeoutMs = 300_000, pollMs = 25): Promise<number> {
  const dir = join(system.dataDir, "runner");
  const t0 = performance.now();
  while (pendingRecordings(dir).length > 0) {
    if (performance.now() - t0 > timeoutMs) throw new Error(`recordings in ${dir} never finished`);
    await new Promise((r) => setTimeout(r, pollMs));
  }
  return performance.now() - t0;
}
