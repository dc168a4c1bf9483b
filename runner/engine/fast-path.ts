/**
 * The bookkeeping of the fast path both drivers take (runner/docker/driver.ts,
 * runner/kubernetes/driver.ts): what each workspace's engine holds as this driver made it, what its
 * stack last recorded, and the background `up`s that record the one after the other.
 *
 * A driver acts on the engine at once (makes, removes or scales the workload), declares the state
 * it made here and answers; the next operation never waits for a recording. Recordings coalesce
 * to the latest declared state: at most one runs per workspace, and one is pending (the latest
 * state, read when it starts); a state declared and replaced before its recording started is
 * never recorded. The policy pack has judged every state the fast path declares before the engine
 * holds it: a resume or heal only repeats the inputs of a state declared before (its key), a first
 * create is judged in process, and any other change takes the full path (an `up`, judged there).
 *
 * A recording of a state that is no longer the latest must never act on the engine beyond what the
 * latest declares: it runs record-only (OperationOptions.recordOnly, stacks/stack-manager.ts: the
 * Docker provider adopts the container as it is, never makes one) and the Kubernetes provider's
 * server-side apply of a `spec.replicas` other than the runner's claim of the latest value is
 * refused (the claim is released only once the latest state is recorded). Such a stale recording
 * fails or records what it found; the pending one then records the latest state. A failed
 * recording of the latest state leaves the workspace unknown here: its next operation takes the
 * full path and reconciles.
 */
import { createHash } from "node:crypto";
import { parseOrThrow } from "../../contracts/errors.ts";
import { SessionSpec } from "../../contracts/session-spec.ts";

export type DriverLog = (
  level: "info" | "warn" | "error",
  msg: string,
  fields?: Record<string, unknown>,
) => void;
/**
 * What every engine's driver is made with besides its engine's own settings (runner/main.ts
 * gives them to runner/docker/index.ts and runner/kubernetes/index.ts).
 */
export type DriverSettings = {
  /** Stop, resume and heal act on the engine at once and record the stack afterwards. */
  fastPath: boolean;
  /** A first create takes the fast path too (when `fastPath`). */
  fastCreate: boolean;
  log: DriverLog;
};
export type Secrets = { credentials: Record<string, string>; adapterToken: string };

/**
 * A state of a session's workload as this driver made it (declared) or its stack records it: a
 * hash of the spec (scale aside) and secrets it runs with at scale 1, and its scale.
 */
export type Recorded = { key: string; replicas: 0 | 1 };

/** The spec (at scale 1, defaults filled) and secrets, hashed: equal keys, equal workload inputs. */
export function recordKey(spec: SessionSpec, secrets: Secrets): string {
  const parsed = parseOrThrow(SessionSpec, { ...spec, replicas: 1 }, "session spec");
  return createHash("sha256")
    .update(JSON.stringify([parsed, secrets.credentials, secrets.adapterToken]))
    .digest("hex");
}

/** What a recording is told when it starts. */
export type RecordContext = {
  /**
   * The stack may still hold the workload this state replaced (a stop and a resume recorded as
   * one, or a heal): refresh before the `up` so it adopts the engine's one.
   */
  refresh: boolean;
  /** True while no newer state was declared since this recording started. */
  latest: () => boolean;
};
export type Recording = (context: RecordContext) => Promise<unknown>;

type Workspace = {
  /** The state the engine holds as this driver made it (absent: unknown, the full path goes). */
  declared?: Recorded;
  /** What the stack records (its last recording or full `up`), when known. */
  recorded?: Recorded;
  /** A recording failed since the last that succeeded: the stack may hold anything. */
  unsure: boolean;
  /** The latest declared state not yet recorded, with how to record it. */
  pending?: { seq: number; state: Recorded; record: Recording };
  /** Bumped by every declaration and every reset. */
  seq: number;
  /** Bumped by every reset (forget: a full path starts, a removal). */
  epoch: number;
  /** The recording running now. */
  running?: Promise<void>;
  /** The recording marks (stacks/recording.ts) of declarations not yet recorded. */
  marks: (() => void)[];
};

export class FastPathRecords {
  readonly #log: DriverLog;
  readonly #workspaces = new Map<string, Workspace>();

  constructor(log: DriverLog) {
    this.#log = log;
  }

  #workspace(containerName: string): Workspace {
    let w = this.#workspaces.get(containerName);
    if (!w) {
      w = { unsure: false, seq: 0, epoch: 0, marks: [] };
      this.#workspaces.set(containerName, w);
    }
    return w;
  }

  /**
   * The state the workspace's engine holds as this driver made it (declared by its last fast
   * path, or recorded by its last full `up`), whose inputs the policy pack judged; undefined when
   * unknown (the full path goes).
   */
  get(containerName: string): Recorded | undefined {
    return this.#workspaces.get(containerName)?.declared;
  }

  /** What the stack records now, as far as this driver knows (tests, diagnostics). */
  recorded(containerName: string): Recorded | undefined {
    return this.#workspaces.get(containerName)?.recorded;
  }

  /** A full `up` recorded `recorded`: the engine holds it and the stack records it. */
  set(containerName: string, recorded: Recorded): void {
    const w = this.#workspace(containerName);
    w.declared = recorded;
    w.recorded = recorded;
    w.unsure = false;
  }

  /**
   * The workspace is unknown from now on (a full path starts, or an operation failed): a pending
   * recording is dropped (the full path's own `up` records what it makes); one running finishes
   * under the stack's lock, before anything the full path runs there, and records nothing here.
   */
  forget(containerName: string): void {
    const w = this.#workspaces.get(containerName);
    if (!w) return;
    w.seq++;
    w.epoch++;
    w.pending = undefined;
    w.declared = undefined;
    w.recorded = undefined;
    if (!w.running) this.#release(w);
  }

  /** Resolves when no recording of the workspace runs or is pending (at once if none). */
  async settled(containerName: string): Promise<void> {
    for (;;) {
      const running = this.#workspaces.get(containerName)?.running;
      if (!running) return;
      await running;
    }
  }

  /**
   * The fast path made `state` on the engine: from now on it is what the engine holds. Its
   * recording (`record`, an `up` under the stack's own lock) runs in the background, now or after
   * the one running, unless a newer state replaces it first. `done` clears the recording mark the
   * fast path set before it acted (stacks/recording.ts), once this state is recorded or replaced.
   */
  record(containerName: string, state: Recorded, record: Recording, done: () => void): void {
    const w = this.#workspace(containerName);
    w.seq++;
    w.declared = state;
    w.pending = { seq: w.seq, state, record };
    w.marks.push(done);
    if (!w.running) w.running = this.#drain(containerName, w);
  }

  async #drain(containerName: string, w: Workspace): Promise<void> {
    for (;;) {
      const next = w.pending;
      if (!next) break;
      w.pending = undefined;
      const epoch = w.epoch;
      const refresh = next.state.replicas === 1 && (w.unsure || w.recorded?.replicas === 1);
      try {
        await next.record({ refresh, latest: () => w.seq === next.seq });
        // Reset (forget) since it started: the full path's own `up` records; nothing known from this.
        if (w.epoch === epoch) {
          w.recorded = next.state;
          w.unsure = false;
        }
      } catch (error) {
        if (w.epoch !== epoch) continue;
        w.unsure = true;
        w.recorded = undefined;
        const fields = { container: containerName, error: (error as Error).message.slice(0, 500) };
        if (w.pending) {
          // Stale: a newer state was declared while it ran; the pending recording records that.
          this.#log("info", "a superseded recording did not finish; recording the latest state", fields);
        } else {
          this.#log("warn", "recording a fast-path change in the stack failed", fields);
          w.declared = undefined;
        }
      }
    }
    this.#release(w);
    w.running = undefined;
    if (!w.declared && !w.recorded) this.#workspaces.delete(containerName);
  }

  #release(w: Workspace): void {
    for (const done of w.marks.splice(0)) done();
  }

  /**
   * Stop. With the engine at replicas 1 as this driver made it, `fast` acts on the engine at once
   * and returns what clears the stack's recording mark (undefined: it could not, take the full
   * path); the stack then records replicas 0 in the background (`stack`, told it is a recording).
   * Otherwise `stack` (a full `up` at scale 0) runs now and is awaited.
   */
  async scaleDown(
    containerName: string,
    fast: (() => Promise<(() => void) | undefined>) | undefined,
    stack: (recording?: RecordContext) => Promise<unknown>,
  ): Promise<void> {
    const last = this.get(containerName);
    const done = fast && last?.replicas === 1 ? await fast() : undefined;
    if (last && done) {
      this.record(containerName, { ...last, replicas: 0 }, stack, done);
      return;
    }
    this.forget(containerName);
    await stack();
    if (last) this.set(containerName, { ...last, replicas: 0 });
  }
}
