import type { RunnerRecord } from "./store/store.ts";

export type Placement =
  | { ok: true; runner: RunnerRecord }
  | { ok: false; code: "UNAVAILABLE" | "RESOURCE_EXHAUSTED"; message: string };

/**
 * Where a new workspace goes: among connected runners with room (`capacity` = how many
 * workspaces it takes), the least loaded; ties go to the runner name, so placement is stable.
 */
export function chooseRunner(
  connected: readonly RunnerRecord[],
  workspacesByRunner: ReadonlyMap<string, number>,
): Placement {
  if (connected.length === 0) return { ok: false, code: "UNAVAILABLE", message: "no runner is connected" };
  const withRoom = connected
    .map((runner) => ({ runner, load: workspacesByRunner.get(runner.runner_id) ?? 0 }))
    .filter(({ runner, load }) => load < runner.capacity)
    .sort(
      (a, b) =>
        a.load / a.runner.capacity - b.load / b.runner.capacity ||
        a.runner.runner_name.localeCompare(b.runner.runner_name),
    );
  const best = withRoom[0];
  if (!best)
    return { ok: false, code: "RESOURCE_EXHAUSTED", message: "every connected runner is at capacity" };
  return { ok: true, runner: best.runner };
}
