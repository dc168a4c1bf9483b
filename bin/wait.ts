import { parseDuration } from "../contracts/duration.ts";
import type { HarnessPhase, HarnessSession } from "../contracts/harness-session.ts";
import { type CliContext, CommandFailed, ExitCode, UsageError } from "./cli-context.ts";

const POLL_MS = 500;

export function parseTimeout(text: string): number {
  const ms = parseDuration(text);
  if (ms === undefined || ms === 0)
    throw new UsageError(`--timeout must be a duration such as 90s or 10m, got ${text}`);
  return ms;
}

function readyOf(s: HarnessSession) {
  return s.status.conditions.find((c) => c.type === "Ready");
}

/**
 * Waits until the controller has settled the session's latest spec (observedGeneration caught
 * up) in `target`, telling each phase change on stderr. A settled Failed is exit 1 with the
 * controller's reason; so is the deadline (the work goes on server-side).
 */
export async function waitForPhase(
  ctx: CliContext,
  namespace: string,
  name: string,
  target: HarnessPhase,
  timeout: string,
  generation?: number,
): Promise<HarnessSession> {
  const deadline = Date.now() + parseTimeout(timeout);
  let last = "";
  for (;;) {
    const s = await ctx.client.get("harnesssessions", namespace, name);
    const ready = readyOf(s);
    const line = `${s.status.phase}${ready ? ` (${ready.reason})` : ""}`;
    if (line !== last) {
      ctx.note(`harnesssession/${name}: ${line}${ready?.message ? ` ${ready.message}` : ""}`);
      last = line;
    }
    const settled = s.status.observedGeneration >= (generation ?? s.metadata.generation);
    if (settled && s.status.phase === target) return s;
    if (settled && s.status.phase === "Failed")
      throw new CommandFailed(
        `harnesssession/${name} failed: ${ready?.reason ?? "unknown"}: ${ready?.message ?? ""}; fix the cause, then \`agent-sessions resume ${name}\` (or delete it)`,
        ExitCode.failure,
      );
    if (Date.now() > deadline)
      throw new CommandFailed(
        `timed out after ${timeout} waiting for harnesssession/${name} to be ${target} (now ${line}); it goes on server-side: watch it with \`agent-sessions get hs ${name}\``,
        ExitCode.failure,
      );
    await new Promise((r) => setTimeout(r, POLL_MS));
  }
}
