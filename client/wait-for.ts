import type { HarnessPhase, HarnessSession } from "../contracts/harness-session.ts";
import type { AgentSessionsClient } from "./client.ts";
import { ClientError } from "./client-error.ts";

export type WaitForOptions = {
  /** Give up after this long with a ClientError DEADLINE_EXCEEDED (the work goes on server-side). @default 600000 */
  timeoutMs?: number;
  /** How often the session is read again. @default 500 */
  pollMs?: number;
  /** Ends the wait with a ClientError CANCELLED. */
  signal?: AbortSignal;
  /** Told each new phase (and Ready reason) as it is seen. */
  onPhase?: (session: HarnessSession) => void;
};

/**
 * Resolves with the HarnessSession once the controller has settled its latest spec
 * (`status.observedGeneration` caught up with `metadata.generation`) in `phase`. A session that
 * settles Failed instead is a ClientError FAILED_PRECONDITION carrying its reason; the deadline
 * is DEADLINE_EXCEEDED; a session that does not exist is NOT_FOUND at once.
 */
export async function waitFor(
  client: AgentSessionsClient,
  namespace: string,
  name: string,
  phase: HarnessPhase,
  options: WaitForOptions = {},
): Promise<HarnessSession> {
  const deadline = Date.now() + (options.timeoutMs ?? 600_000);
  let last = "";
  for (;;) {
    if (options.signal?.aborted)
      throw new ClientError("CANCELLED", `waiting for harnesssession ${namespace}/${name} was cancelled`);
    const session = await client.get("harnesssessions", namespace, name);
    const ready = session.status.conditions.find((c) => c.type === "Ready");
    const seen = `${session.status.phase}/${ready?.reason ?? ""}`;
    if (seen !== last) {
      last = seen;
      options.onPhase?.(session);
    }
    const settled = session.status.observedGeneration >= session.metadata.generation;
    if (settled && session.status.phase === phase) return session;
    if (settled && session.status.phase === "Failed")
      throw new ClientError(
        "FAILED_PRECONDITION",
        `harnesssession ${namespace}/${name} failed: ${ready?.reason ?? "unknown"}: ${ready?.message ?? ""}`,
        { details: { phase: "Failed", ...(ready ? { reason: ready.reason } : {}) } },
      );
    const left = deadline - Date.now();
    if (left <= 0)
      throw new ClientError(
        "DEADLINE_EXCEEDED",
        `harnesssession ${namespace}/${name} is not ${phase} after ${options.timeoutMs ?? 600_000} ms (now ${session.status.phase}${ready ? `, ${ready.reason}` : ""})`,
      );
    await new Promise<void>((resolve) => {
      const timer = setTimeout(done, Math.min(options.pollMs ?? 500, left));
      function done() {
        clearTimeout(timer);
        options.signal?.removeEventListener("abort", done);
        resolve();
      }
      options.signal?.addEventListener("abort", done, { once: true });
    });
  }
}
