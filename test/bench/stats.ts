/**
 * The statistics every benchmark prints, in one place: nearest-rank percentiles (the value at rank
 * ⌈p/100 · n⌉ of the sorted samples, so every figure printed is one that was measured).
 */

/** The nearest-rank `p`th percentile of `values` (not modified); NaN when there are none. */
export function percentile(values: ArrayLike<number>, p: number): number {
  const sorted = Array.from(values).sort((a, b) => a - b);
  return (
    sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))] ?? Number.NaN
  );
}

/** The nearest-rank median. */
export function p50(values: ArrayLike<number>): number {
  return percentile(values, 50);
}
