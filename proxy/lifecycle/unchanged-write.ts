/**
 * A PUT that would store what is stored already changes nothing (kubectl's "unchanged"): no new
 * generation, no reconcile, no write. The answer says so in this header (`unchanged`, else
 * `configured` or `created`), which `agent-sessions apply` prints.
 */
export const WRITE_RESULT_HEADER = "x-agent-sessions-write";

export type WriteResult = "created" | "configured" | "unchanged";

/** Equal as JSON values, whatever the order of object keys (undefined members left out). */
export function sameJson(a: unknown, b: unknown): boolean {
  return canonical(a) === canonical(b);
}

function canonical(value: unknown): string {
  return JSON.stringify(value, (_key, v: unknown) =>
    v && typeof v === "object" && !Array.isArray(v)
      ? Object.fromEntries(Object.entries(v as Record<string, unknown>).sort(([x], [y]) => (x < y ? -1 : 1)))
      : v,
  );
}
