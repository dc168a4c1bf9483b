/**
 * The bookkeeping of the stop/resume fast path both drivers take (runner/docker/driver.ts,
 * runner/kubernetes/driver.ts): what each workspace's stack last recorded as this driver made it, and the
 * background `up` that records a change the fast path already made on the engine.
 *
 * A driver acts on the engine at once (removes or scales the workload), answers, and hands the
 * `up` that records the same change to `record()`: it runs in the background, under the stack's
 * own lock (stacks/). The workspace's next operation waits for it (`settled()`), so the stack is
 * the declaration of record again before anything else happens to it. A failed recording leaves
 * the workspace unknown here: its next operation takes the full path and reconciles.
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
 * What the stack of a session last recorded, as this driver made it: a hash of the spec (scale
 * aside) and secrets of its last `up` at scale 1, and the scale it is at now.
 */
export type Recorded = { key: string; replicas: 0 | 1 };

/** The spec (at scale 1, defaults filled) and secrets, hashed: equal keys, equal workload inputs. */
export function recordKey(spec: SessionSpec, secrets: Secrets): string {
  const parsed = parseOrThrow(SessionSpec, { ...spec, replicas: 1 }, "session spec");
  return createHash("sha256")
    .update(JSON.stringify([parsed, secrets.credentials, secrets.adapterToken]))
    .digest("hex");
}

export class FastPathRecords {
  readonly #log: DriverLog;
  /** Per workspace: what its stack records (absent: unknown to this driver, the full path goes). */
  readonly #recorded = new Map<string, Recorded>();
  /** Per workspace: the background `up` recording its last fast-path change. */
  readonly #settling = new Map<string, Promise<void>>();
  /** Per workspace: what that background `up` will record once it succeeds. */
  readonly #recording = new Map<string, Recorded>();

  constructor(log: DriverLog) {
    this.#log = log;
  }

  /** What the workspace's stack records, when this driver knows (it ran the last `up` itself). */
  get(containerName: string): Recorded | undefined {
    return this.#recorded.get(containerName);
  }

  /**
   * What the stack records, or will record once the `up` in flight succeeds: for an operation
   * that changes nothing the stack declares (a Kubernetes heal) and need not wait for it.
   */
  intended(containerName: string): Recorded | undefined {
    return this.#recorded.get(containerName) ?? this.#recording.get(containerName);
  }

  /** The stack recorded `recorded` (an `up` of the full path finished). */
  set(containerName: string, recorded: Recorded): void {
    this.#recorded.set(containerName, recorded);
  }

  /** The stack's record is unknown from now on (an operation on it starts or failed). */
  forget(containerName: string): void {
    this.#recorded.delete(containerName);
  }

  /** Resolves when the workspace's last fast-path change is recorded in its stack (at once if none). */
  async settled(containerName: string): Promise<void> {
    for (;;) {
      const pending = this.#settling.get(containerName);
      if (!pending) return;
      await pending;
      if (this.#settling.get(containerName) === pending) this.#settling.delete(containerName);
    }
  }

  /**
   * Records a change the fast path already made: `record` (an `up`) runs in the background under
   * the stack's own lock; `done` clears the pending mark (stacks/recording.ts). A failed
   * recording leaves the stack unknown to this driver, so the next operation takes the full path
   * and reconciles.
   */
  record(containerName: string, next: Recorded, record: () => Promise<unknown>, done: () => void): void {
    this.#recorded.delete(containerName);
    this.#recording.set(containerName, next);
    const pending = record()
      .then(
        () => void this.#recorded.set(containerName, next),
        (error: unknown) =>
          this.#log("warn", "recording a fast-path change in the stack failed", {
            container: containerName,
            error: (error as Error).message.slice(0, 500),
          }),
      )
      .finally(() => {
        if (this.#settling.get(containerName) === pending) this.#recording.delete(containerName);
        done();
      });
    this.#settling.set(containerName, pending);
  }

  /**
   * Stop. With a record of replicas 1, `fast` acts on the engine at once and returns what clears
   * the stack's recording mark (undefined: it could not, take the full path); the stack then
   * records replicas 0 in the background (`stack`). Otherwise `stack` (a full `up` at scale 0)
   * runs now and is awaited.
   */
  async scaleDown(
    containerName: string,
    fast: (() => Promise<(() => void) | undefined>) | undefined,
    stack: () => Promise<unknown>,
  ): Promise<void> {
    await this.settled(containerName);
    const last = this.#recorded.get(containerName);
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
