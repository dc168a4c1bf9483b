import { AwakeDeadline } from "../../contracts/awake-deadline.ts";

/** How `until` polls. */
export type UntilOptions = {
  /** Between probes. @default 25 */
  intervalMs?: number;
  /**
   * Probe again after it threw (engines answer errors while they come up), and name the last error
   * in the timeout. @default false: a probe that throws fails at once
   */
  retryErrors?: boolean;
};

/**
 * The one polling helper of the tests: calls `probe` until it returns a value other than
 * undefined and returns it; past `timeoutMs` it throws "timed out … waiting for <what>".
 */
export async function until<T>(
  what: string,
  probe: () => T | undefined | Promise<T | undefined>,
  timeoutMs = 10_000,
  options: UntilOptions = {},
): Promise<T> {
  // Running time only: a machine that stops for a minute mid-wait does not end it (awake-deadline.ts).
  const deadline = new AwakeDeadline(timeoutMs);
  let last: unknown;
  for (;;) {
    try {
      const value = await probe();
      if (value !== undefined) return value;
    } catch (error) {
      if (!options.retryErrors) throw error;
      last = error;
    }
    if (deadline.passed())
      throw new Error(
        `timed out after ${timeoutMs} ms waiting for ${what}${last ? `: ${String(last)}` : ""}`,
      );
    await new Promise((r) => setTimeout(r, options.intervalMs ?? 25));
  }
}

/** `until` for the engines: the timeout in seconds, a probe that threw is tried again. */
export function untilSeconds<T>(
  what: string,
  seconds: number,
  probe: () => T | undefined | Promise<T | undefined>,
): Promise<T> {
  return until(what, probe, seconds * 1000, { intervalMs: 200, retryErrors: true });
}
