/**
 * Consistency of a snapshot (issue 38): a snapshot is taken between requests. The runner counts
 * the relayed requests in flight per workspace; a snapshot `hold`s the workspace: relays that
 * arrive meanwhile wait (`enter`) until it ends, and it waits for those already in flight up to
 * its bound, else gives up with ABORTED (the server answers 409) having made nothing.
 */
import { CodedError } from "../../contracts/errors.ts";

type Workspace = {
  inFlight: number;
  /** Resolves when the hold under way ends; undefined when none. */
  held?: Promise<void>;
  /** Called whenever `inFlight` drops (a hold waiting for it to reach 0 checks again). */
  drained?: () => void;
};

export class SnapshotGate {
  readonly #workspaces = new Map<string, Workspace>();

  #of(containerName: string): Workspace {
    let w = this.#workspaces.get(containerName);
    if (!w) {
      w = { inFlight: 0 };
      this.#workspaces.set(containerName, w);
    }
    return w;
  }

  #tidy(containerName: string, w: Workspace): void {
    if (w.inFlight === 0 && !w.held && this.#workspaces.get(containerName) === w)
      this.#workspaces.delete(containerName);
  }

  /**
   * A relayed request starts: waits while a snapshot of the workspace is taken (or until `signal`
   * aborts). Resolves with its release, called once when the request ends.
   */
  async enter(containerName: string, signal?: AbortSignal): Promise<() => void> {
    let w = this.#of(containerName);
    while (w.held) {
      await untilOrAborted(w.held, signal);
      w = this.#of(containerName);
    }
    w.inFlight += 1;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      w.inFlight -= 1;
      w.drained?.();
      this.#tidy(containerName, w);
    };
  }

  /** Requests relayed to the workspace now. */
  inFlight(containerName: string): number {
    return this.#workspaces.get(containerName)?.inFlight ?? 0;
  }

  /**
   * Holds the workspace for a snapshot: new requests wait from now on; resolves with the release
   * once none is in flight, or ABORTED (the hold released) when some still are after `quiesceMs`.
   * A second hold of the same workspace waits for the first to end.
   */
  async hold(containerName: string, quiesceMs: number, signal?: AbortSignal): Promise<() => void> {
    let w = this.#of(containerName);
    while (w.held) {
      await untilOrAborted(w.held, signal);
      w = this.#of(containerName);
    }
    signal?.throwIfAborted();
    let end!: () => void;
    w.held = new Promise<void>((resolve) => {
      end = resolve;
    });
    const release = () => {
      if (!w.held) return;
      w.held = undefined;
      w.drained = undefined;
      end();
      this.#tidy(containerName, w);
    };
    if (w.inFlight > 0) {
      let timer: NodeJS.Timeout | undefined;
      const drained = await untilOrAborted(
        new Promise<boolean>((resolve) => {
          timer = setTimeout(() => resolve(false), quiesceMs);
          w.drained = () => {
            if (w.inFlight > 0) return;
            resolve(true);
          };
        }),
        signal,
      )
        .catch((error: unknown) => {
          release();
          throw error;
        })
        .finally(() => clearTimeout(timer));
      w.drained = undefined;
      if (!drained) {
        const left = w.inFlight;
        release();
        throw new CodedError(
          "ABORTED",
          `workspace ${containerName} still had ${left} request${left === 1 ? "" : "s"} in flight after ${quiesceMs} ms: no snapshot was taken; retry once ${left === 1 ? "it ends" : "they end"}`,
          { in_flight: left, quiesce_ms: quiesceMs },
        );
      }
    }
    return release;
  }
}

/** `promise`, or the signal's reason once it aborts (at once when it already has). */
function untilOrAborted<T>(promise: Promise<T>, signal: AbortSignal | undefined): Promise<T> {
  if (!signal) return promise;
  if (signal.aborted) return Promise.reject(signal.reason);
  let onAbort: (() => void) | undefined;
  return Promise.race([
    promise,
    new Promise<never>((_, reject) => {
      onAbort = () => reject(signal.reason);
      signal.addEventListener("abort", onAbort, { once: true });
    }),
  ]).finally(() => {
    if (onAbort) signal.removeEventListener("abort", onAbort);
  });
}
