/** How often `get -w` asks again. */
export const WATCH_INTERVAL_MS = 1000;

/**
 * `get -w`: asks again every `intervalMs` and reports each row that is new or differs from what
 * was last printed, and each row gone, until SIGINT or SIGTERM (then it resolves: exit 0). A
 * failed poll (the server restarting) is told and retried, never the end of the watch; a NOT_FOUND
 * of a watched name is a deletion.
 */
export async function watchLoop<T>(options: {
  initial: readonly T[];
  keyOf: (row: T) => string;
  fetch: () => Promise<T[]>;
  changed: (rows: T[], headerShown: boolean) => void;
  deleted: (row: T) => void;
  onError: (error: unknown) => void;
  headerShown: boolean;
  intervalMs?: number;
  signal?: AbortSignal;
}): Promise<void> {
  const abort = new AbortController();
  const stop = () => abort.abort();
  process.once("SIGINT", stop);
  process.once("SIGTERM", stop);
  options.signal?.addEventListener("abort", stop, { once: true });
  const seen = new Map(options.initial.map((r) => [options.keyOf(r), { row: r, json: JSON.stringify(r) }]));
  let headerShown = options.headerShown;
  try {
    while (!abort.signal.aborted) {
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, options.intervalMs ?? WATCH_INTERVAL_MS);
        abort.signal.addEventListener("abort", () => {
          clearTimeout(timer);
          resolve();
        });
      });
      if (abort.signal.aborted) return;
      let rows: T[];
      try {
        rows = await options.fetch();
      } catch (error) {
        if ((error as { code?: string }).code === "NOT_FOUND") rows = [];
        else {
          options.onError(error);
          continue;
        }
      }
      const changed: T[] = [];
      const now = new Set<string>();
      for (const row of rows) {
        const key = options.keyOf(row);
        now.add(key);
        const json = JSON.stringify(row);
        if (seen.get(key)?.json !== json) changed.push(row);
        seen.set(key, { row, json });
      }
      for (const [key, { row }] of seen)
        if (!now.has(key)) {
          seen.delete(key);
          options.deleted(row);
        }
      if (changed.length > 0) {
        options.changed(changed, headerShown);
        headerShown = true;
      }
    }
  } finally {
    process.off("SIGINT", stop);
    process.off("SIGTERM", stop);
  }
}
