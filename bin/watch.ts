import type { EventFrame } from "../contracts/compass.ts";
import type { EventMessage } from "../client/client.ts";

/** How often `get -w` asks again when it polls. */
export const WATCH_INTERVAL_MS = 1000;

/**
 * How often `get -w` over the event stream lists everything again, for what no event reports (a
 * session created, edited or deleted while no agent session of it runs, e.g. before it is placed):
 * an informer's resync. `AGENT_SESSIONS_WATCH_RESYNC_MS` overrides it.
 */
export const WATCH_RESYNC_MS = 30_000;

/** What a watch does with what it finds. */
export type WatchReport<T> = {
  keyOf: (row: T) => string;
  /** What is printed of a row: a row is printed again only when this differs (default: its JSON). */
  lineOf?: (row: T) => string;
  changed: (rows: T[], headerShown: boolean) => void;
  deleted: (row: T) => void;
  onError: (error: unknown) => void;
};

/** What a watch printed last of each row, so that only a row that differs is printed again. */
class Printed<T> {
  readonly #seen: Map<string, { row: T; json: string }>;
  readonly #report: WatchReport<T>;
  headerShown: boolean;

  constructor(initial: readonly T[], report: WatchReport<T>, headerShown: boolean) {
    this.#report = report;
    this.#seen = new Map(initial.map((r) => [report.keyOf(r), { row: r, json: this.#lineOf(r) }]));
    this.headerShown = headerShown;
  }

  get rows(): T[] {
    return [...this.#seen.values()].map((s) => s.row);
  }

  /** Every row there is now: the new or changed ones printed, the ones not there any more deleted. */
  all(rows: readonly T[]): void {
    const now = new Set<string>();
    const changed: T[] = [];
    for (const row of rows) {
      const key = this.#report.keyOf(row);
      now.add(key);
      if (this.#note(key, row)) changed.push(row);
    }
    for (const [key, { row }] of this.#seen)
      if (!now.has(key)) {
        this.#seen.delete(key);
        this.#report.deleted(row);
      }
    this.#print(changed);
  }

  /** One row as it is now (undefined: it is gone). */
  one(key: string, row: T | undefined): void {
    if (row === undefined) {
      const gone = this.#seen.get(key);
      if (gone === undefined) return;
      this.#seen.delete(key);
      this.#report.deleted(gone.row);
      return;
    }
    if (this.#note(key, row)) this.#print([row]);
  }

  #lineOf(row: T): string {
    return this.#report.lineOf?.(row) ?? JSON.stringify(row);
  }

  #note(key: string, row: T): boolean {
    const json = this.#lineOf(row);
    if (this.#seen.get(key)?.json === json) return false;
    this.#seen.set(key, { row, json });
    return true;
  }

  #print(rows: T[]): void {
    if (rows.length === 0) return;
    this.#report.changed(rows, this.headerShown);
    this.headerShown = true;
  }
}

/** Ends on SIGINT or SIGTERM (or `signal`); `off` forgets the handlers. */
function interruption(signal?: AbortSignal): { signal: AbortSignal; off: () => void } {
  const abort = new AbortController();
  const stop = () => abort.abort();
  process.once("SIGINT", stop);
  process.once("SIGTERM", stop);
  signal?.addEventListener("abort", stop, { once: true });
  return {
    signal: abort.signal,
    off: () => {
      process.off("SIGINT", stop);
      process.off("SIGTERM", stop);
    },
  };
}

/**
 * `get -w` by polling: asks again every `intervalMs` and reports each row that is new or differs
 * from what was last printed, and each row gone, until SIGINT or SIGTERM (then it resolves: exit
 * 0). A failed poll (the server restarting) is told and retried, never the end of the watch; a
 * NOT_FOUND of a watched name is a deletion.
 */
export async function watchLoop<T>(
  options: WatchReport<T> & {
    initial: readonly T[];
    fetch: () => Promise<T[]>;
    headerShown: boolean;
    intervalMs?: number;
    signal?: AbortSignal;
  },
): Promise<void> {
  const { signal, off } = interruption(options.signal);
  const printed = new Printed(options.initial, options, options.headerShown);
  try {
    while (!signal.aborted) {
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, options.intervalMs ?? WATCH_INTERVAL_MS);
        signal.addEventListener("abort", () => {
          clearTimeout(timer);
          resolve();
        });
      });
      if (signal.aborted) return;
      let rows: T[];
      try {
        rows = await options.fetch().catch(notFoundIsNone);
      } catch (error) {
        options.onError(error);
        continue;
      }
      printed.all(rows);
    }
  } finally {
    off();
  }
}

/** How a watch over the event stream ended: interrupted (exit 0), or the stream failed. */
export type EventWatchEnd<T> =
  | { ended: "interrupted" }
  | { ended: "stream-failed"; error: unknown; rows: T[]; headerShown: boolean };

/**
 * `get -w` over the server's event stream (`GET /v1/events`): each frame that may change a row
 * (a status transition, a PhaseChanged or RequestFinished event, a result or error) has that row
 * read again (`fetchOne`, by the key `keyOfFrame` names; undefined: it is gone) and printed if it
 * differs. Everything is listed again when the stream opens (and reopens: what happened while it
 * was down) and every `resyncMs`. Reads happen one at a time, in order, a row asked for twice
 * while waiting read once. Resolves at SIGINT or SIGTERM; when the stream fails for good (the
 * client gave up reconnecting, or the server refused it), with the error and what was printed,
 * for the caller to fall back to polling or to fail.
 */
export async function watchEvents<T>(
  options: WatchReport<T> & {
    initial: readonly T[];
    headerShown: boolean;
    follow: (signal: AbortSignal, onOpen: () => void) => AsyncIterable<EventMessage>;
    keyOfFrame: (frame: EventFrame) => string | undefined;
    fetchOne: (key: string) => Promise<T | undefined>;
    fetchAll: () => Promise<T[]>;
    resyncMs?: number;
    signal?: AbortSignal;
  },
): Promise<EventWatchEnd<T>> {
  const { signal, off } = interruption(options.signal);
  const printed = new Printed(options.initial, options, options.headerShown);
  const dirty = new Set<string>();
  let everything = false;
  let draining = false;
  const drain = async () => {
    draining = true;
    while (!signal.aborted && (everything || dirty.size > 0)) {
      try {
        if (everything) {
          everything = false;
          dirty.clear();
          printed.all(await options.fetchAll().catch(notFoundIsNone));
        } else {
          const key = dirty.values().next().value as string;
          dirty.delete(key);
          printed.one(key, await options.fetchOne(key));
        }
      } catch (error) {
        options.onError(error);
      }
    }
    draining = false;
  };
  const kick = () => {
    if (!draining) void drain();
  };
  const resync = setInterval(() => {
    everything = true;
    kick();
  }, options.resyncMs ?? WATCH_RESYNC_MS);
  try {
    const stream = options.follow(signal, () => {
      everything = true;
      kick();
    });
    for await (const event of stream) {
      if (event.kind !== "frame" || !changesRows(event.frame)) continue;
      const key = options.keyOfFrame(event.frame);
      if (key === undefined) continue;
      dirty.add(key);
      kick();
    }
    return { ended: "interrupted" };
  } catch (error) {
    if (signal.aborted) return { ended: "interrupted" };
    return { ended: "stream-failed", error, rows: printed.rows, headerShown: printed.headerShown };
  } finally {
    clearInterval(resync);
    off();
  }
}

/** A watched name that is NOT_FOUND is gone: no rows; any other error is one. */
function notFoundIsNone(error: unknown): never[] {
  if ((error as { code?: string }).code === "NOT_FOUND") return [];
  throw error;
}

/** Frames after which a session's row may read differently (not its deltas, messages or tool calls). */
function changesRows(frame: EventFrame): boolean {
  if (frame.type === "status" || frame.type === "result" || frame.type === "error") return true;
  return frame.type === "log" && typeof frame.payload.event === "string";
}

/**
 * The HarnessSession a frame is about, as `namespace/name`: the server names it on every frame
 * (`namespace`, `name`; issue 42); an older server only in the events that name it themselves
 * (`payload.harness_session`). Undefined for a session opened over the RPC API.
 */
export function harnessSessionOf(frame: EventFrame): string | undefined {
  if (frame.namespace !== undefined && frame.name !== undefined) return `${frame.namespace}/${frame.name}`;
  const named = (frame.payload as { harness_session?: { namespace?: unknown; name?: unknown } })
    .harness_session;
  return typeof named?.namespace === "string" && typeof named.name === "string"
    ? `${named.namespace}/${named.name}`
    : undefined;
}
