import { z } from "zod";

/**
 * Durations as people write them in manifests (`idleTimeout: 15m`): one or more `<integer><unit>`
 * parts, units `ms`, `s`, `m`, `h` (Go's `time.ParseDuration` subset, no fractions, no sign), or a
 * bare `0`. Kept as text in specs so a GET returns what was written.
 */
const UNIT_MS = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000 } as const;
const PART = /(\d+)(ms|s|m|h)/y;

/** Milliseconds of a duration, or undefined when the text is not one. */
export function parseDuration(text: string): number | undefined {
  if (text === "0") return 0;
  if (text.length === 0 || text.length > 32) return undefined;
  let total = 0;
  PART.lastIndex = 0;
  while (PART.lastIndex < text.length) {
    const match = PART.exec(text);
    if (!match) return undefined;
    total += Number(match[1]) * UNIT_MS[match[2] as keyof typeof UNIT_MS];
  }
  return Number.isSafeInteger(total) ? total : undefined;
}

/** The longest idle timeout a session may ask for (30 days). */
export const MAX_IDLE_TIMEOUT_MS = 30 * 24 * 3_600_000;

/** An idle timeout: a duration up to 30 days; `0` turns idle stopping off. */
export const IdleTimeout = z.string().refine(
  (text) => {
    const ms = parseDuration(text);
    return ms !== undefined && ms <= MAX_IDLE_TIMEOUT_MS;
  },
  { message: "must be a duration such as 30s, 15m or 1h30m (units ms, s, m, h) up to 720h, or 0 for never" },
);
