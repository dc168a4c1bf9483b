import type { SnapshotStorage } from "../../contracts/session-snapshot.ts";
import type { ErrorCode } from "../../contracts/errors.ts";
import { formatLabels, type RunnerSelector, selectorMatches } from "../../contracts/runners.ts";
import type { RunnerRecord } from "../store/store.ts";
import type { Engine } from "../../contracts/session-spec.ts";

/** The `details.reason` of a placement refusal that a new or changed runner may lift (retry later). */
export const UNSCHEDULABLE = "Unschedulable";

/**
 * What a user does about each refusal, as `details.remedy`: a Pending HarnessSession shows it
 * beside the refusal (issue 34 item 2), where "no runner is connected" alone left them guessing.
 * A detail, not part of the message, which RPC callers match as it is.
 */
export const PLACEMENT_REMEDIES = {
  noRunner:
    "start one (agent-sessions runner --server URL), or run `agent-sessions serve` without --no-runner; if its embedded runner could not start, serve's log says why",
  draining: (names: readonly string[]) =>
    `undrain one (${names.map((n) => `agent-sessions undrain ${n}`).join(", ")}) or start another runner`,
  full: "start another runner, or raise a runner's capacity (AGENT_SESSIONS_RUNNER_CAPACITY); a session that stops frees its place",
} as const;

/** The engines a workspace may be placed on, and why (said in a refusal). */
export type EngineRequirement = { allowed: readonly Engine[]; why: string };

/**
 * A fork's seed (issue 38): its new workspace goes on the runner holding the snapshot (the copy
 * is made on that engine), and its provision carries `spec.seedSnapshot` until one answers
 * `seeded_snapshot`.
 */
export type ForkSeed = { runnerId: string; runnerName: string; storage: SnapshotStorage };

export type Placement =
  | { ok: true; runner: RunnerRecord }
  | {
      ok: false;
      code: Extract<ErrorCode, "UNAVAILABLE" | "RESOURCE_EXHAUSTED" | "FAILED_PRECONDITION">;
      message: string;
      details?: Record<string, unknown>;
    };

/**
 * Where a new workspace goes. Among the connected runners whose labels match `selector` (every
 * key with the same value; none or `{}` matches any), not draining and with room (`capacity` =
 * how many workspaces it takes), the least loaded relative to its capacity; ties go to the
 * runner name, so placement is stable. A refusal says why in terms a user can act on: no runner
 * at all (UNAVAILABLE), none matching the selector or every match draining (FAILED_PRECONDITION),
 * every candidate full (RESOURCE_EXHAUSTED). With `engines` only runners of those engines are
 * candidates (a session in the paused tier goes only where it can be frozen); none: refused
 * (FAILED_PRECONDITION) naming them and why. Refusals a runner change may lift carry
 * `details.reason: Unschedulable` and the selector.
 */
export function chooseRunner(
  connected: readonly RunnerRecord[],
  workspacesByRunner: ReadonlyMap<string, number>,
  selector?: RunnerSelector,
  /** Only runners of these engines (a session in the paused tier: the engines that can freeze). @default any */
  engines?: EngineRequirement,
): Placement {
  if (connected.length === 0)
    return {
      ok: false,
      code: "UNAVAILABLE",
      message: "no runner is connected",
      details: { remedy: PLACEMENT_REMEDIES.noRunner },
    };
  const selected = selector && Object.keys(selector).length > 0 ? selector : undefined;
  const wanted = selected ? `runnerSelector ${formatLabels(selected)}` : "";
  const details = { reason: UNSCHEDULABLE, ...(selected ? { runner_selector: selected } : {}) };
  const matching = connected.filter((runner) => selectorMatches(selected, runner.labels));
  if (matching.length === 0)
    return {
      ok: false,
      code: "FAILED_PRECONDITION",
      message: `no connected runner matches ${wanted}; connected: ${connected
        .map((r) => `${r.runner_name} ${formatLabels(r.labels)}`)
        .join(", ")}`,
      // No remedy: the message names the selector and every runner's labels, and RPC callers
      // compare these details whole.
      details,
    };
  const able = engines ? matching.filter((runner) => engines.allowed.includes(runner.engine)) : matching;
  if (able.length === 0)
    return {
      ok: false,
      code: "FAILED_PRECONDITION",
      message: `no connected runner${selected ? ` matching ${wanted}` : ""} runs ${engines?.allowed.join(" or ")} (${engines?.why}); connected: ${matching
        .map((r) => `${r.runner_name} (${r.engine})`)
        .join(", ")}`,
      details,
    };
  const open = able.filter((runner) => !runner.draining);
  if (open.length === 0)
    return {
      ok: false,
      code: "FAILED_PRECONDITION",
      message: `every connected runner${selected ? ` matching ${wanted}` : ""} is draining: ${able
        .map((r) => r.runner_name)
        .join(", ")}`,
      details: { ...details, remedy: PLACEMENT_REMEDIES.draining(able.map((r) => r.runner_name)) },
    };
  const withRoom = open
    .map((runner) => ({ runner, load: workspacesByRunner.get(runner.runner_id) ?? 0 }))
    .filter(({ runner, load }) => load < runner.capacity)
    .sort(
      (a, b) =>
        a.load / a.runner.capacity - b.load / b.runner.capacity ||
        a.runner.runner_name.localeCompare(b.runner.runner_name),
    );
  const best = withRoom[0];
  if (!best) {
    const draining = able.filter((r) => r.draining).map((r) => r.runner_name);
    return {
      ok: false,
      code: "RESOURCE_EXHAUSTED",
      message: `every connected runner${selected ? ` matching ${wanted}` : ""} that takes placements is at capacity: ${open
        .map((r) => `${r.runner_name} (${workspacesByRunner.get(r.runner_id) ?? 0}/${r.capacity})`)
        .join(", ")}${draining.length > 0 ? `; draining: ${draining.join(", ")}` : ""}`,
      details: { ...details, remedy: PLACEMENT_REMEDIES.full },
    };
  }
  return { ok: true, runner: best.runner };
}
