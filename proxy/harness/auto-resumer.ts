import { CodedError } from "../../contracts/errors.ts";
import { HARNESS_SESSION_KIND } from "../../contracts/harness-session.ts";
import { autoResumePlan } from "./auto-resume-plan.ts";
import type { HarnessController } from "./harness-controller.ts";
import { readyOf } from "./harness-status.ts";
import type { Logger } from "../observability/log.ts";
import type { SessionJournal } from "../lifecycle/session-journal.ts";
import { SingleFlight } from "../lifecycle/single-flight.ts";
import type { HarnessRecord, HarnessStore } from "../store/harness-store.ts";

export type AutoResumerOptions = {
  harness: HarnessStore;
  controller: Pick<HarnessController, "autoResume" | "holdAwake">;
  /** Where the `AutoResumed` event goes (a `log` frame on the agent session's event stream). */
  journal: Pick<SessionJournal, "append">;
  log: Logger;
  /** How long requests wait for an auto-resumed session to come Ready; then 504 (AGENT_SESSIONS_AUTO_RESUME_TIMEOUT_MS). */
  timeoutMs: number;
  /** How often the store is read while waiting. @default 100 */
  pollMs?: number;
};

/** A session a request may now be admitted to; `release` once it was admitted (or refused). */
export type AwakeSession = { record: HarnessRecord; release: () => void };

/**
 * Auto-resume (spec.autoResume) on the request path: a request to a session stopped for
 * IdleTimeout has the controller resume it, waits (bounded by `timeoutMs`) until it is Ready and
 * hands it back, so the request is served as one slower reply. Concurrent requests for one
 * session share one resume and one wait (single flight); each is still admitted, and counted, on
 * its own. While they wait the session is held awake (no idle stop before they are admitted).
 */
export class AutoResumer {
  readonly #o: Required<AutoResumerOptions>;
  readonly #flights = new SingleFlight();

  constructor(options: AutoResumerOptions) {
    this.#o = { pollMs: 100, ...options };
  }

  /**
   * For a session that is not Ready: undefined when it is not to be auto-resumed (the caller
   * answers as without auto-resume); else the Ready session once it is. Throws
   * DEADLINE_EXCEEDED when it is not Ready within the timeout (the resume itself goes on),
   * FAILED_PRECONDITION when the resume failed or the session was stopped or deleted meanwhile,
   * CANCELLED when the client went away while waiting (nothing is admitted then).
   */
  async awaitReady(
    record: HarnessRecord,
    requestId: string,
    signal: AbortSignal,
  ): Promise<AwakeSession | undefined> {
    if (autoResumePlan(record) === "refuse") return undefined;
    const { namespace, name } = record;
    const release = this.#o.controller.holdAwake(namespace, name);
    try {
      const ready = await this.#flights.run(`${namespace}/${name}`, () =>
        this.#resume(namespace, name, requestId),
      );
      if (signal.aborted)
        throw new CodedError("CANCELLED", `the client went away while ${namespace}/${name} was resuming`);
      return { record: ready, release };
    } catch (error) {
      release();
      throw error;
    }
  }

  /** One resume of one session, and the wait for it: shared by every request that arrives meanwhile. */
  async #resume(namespace: string, name: string, requestId: string): Promise<HarnessRecord> {
    const began = Date.now();
    const deadline = began + this.#o.timeoutMs;
    // The controller's part (provision, start) may outlast the deadline: it goes on regardless.
    const starting = this.#o.controller.autoResume(namespace, name, requestId);
    starting.catch((error: unknown) =>
      this.#o.log("error", "auto-resume failed", { namespace, name, error: String(error) }),
    );
    let timer: NodeJS.Timeout | undefined;
    const start = await Promise.race([
      starting,
      new Promise<undefined>((resolve) => {
        timer = setTimeout(() => resolve(undefined), this.#o.timeoutMs);
      }),
    ]).finally(() => clearTimeout(timer));
    if (start === undefined) throw await this.#tooLate(namespace, name);
    if (!start.record)
      throw new CodedError("NOT_FOUND", `${HARNESS_SESSION_KIND} ${namespace}/${name} not found`);
    let current = start.record;
    if (start.action === "refuse") throw resumeFailed(namespace, name, current);
    for (;;) {
      if (current.phase === "Ready") break;
      if (autoResumePlan(current) === "refuse") throw resumeFailed(namespace, name, current);
      if (Date.now() >= deadline) throw await this.#tooLate(namespace, name, current);
      await new Promise((resolve) => setTimeout(resolve, this.#o.pollMs));
      current = (await this.#o.harness.getHarnessSession(namespace, name)) ?? current;
    }
    if (start.action === "resume") {
      const resumedInMs = Date.now() - began;
      this.#o.log("info", "harness session auto-resumed", {
        namespace,
        name,
        request_id: requestId,
        resumed_in_ms: resumedInMs,
      });
      if (current.session_id !== undefined)
        await this.#o.journal
          .append(current.session_id, {
            type: "log",
            payload: {
              event: "AutoResumed",
              harness_session: { namespace, name },
              request_id: requestId,
              resumed_in_ms: resumedInMs,
              message: `${HARNESS_SESSION_KIND} ${namespace}/${name} was stopped for IdleTimeout and resumed for request ${requestId}`,
            },
          })
          .catch((error: unknown) =>
            this.#o.log("warn", "AutoResumed event not recorded", { namespace, name, error: String(error) }),
          );
    }
    return current;
  }

  /** DEADLINE_EXCEEDED, with where the resume stands. */
  async #tooLate(namespace: string, name: string, known?: HarnessRecord): Promise<CodedError> {
    const current = (await this.#o.harness.getHarnessSession(namespace, name)) ?? known;
    const ready = current ? readyOf(current.conditions) : undefined;
    const where = current ? `phase ${current.phase}${ready ? `, reason ${ready.reason}` : ""}` : "gone";
    return new CodedError(
      "DEADLINE_EXCEEDED",
      `${HARNESS_SESSION_KIND} ${namespace}/${name} did not become Ready within ${this.#o.timeoutMs} ms of its auto-resume (${where}); it goes on resuming, retry later`,
      {
        ...(current ? { phase: current.phase } : {}),
        ...(ready ? { reason: ready.reason } : {}),
        timeout_ms: this.#o.timeoutMs,
      },
    );
  }
}

function resumeFailed(namespace: string, name: string, record: HarnessRecord): CodedError {
  const ready = readyOf(record.conditions);
  const deleting = record.deletion_requested_at !== undefined;
  return new CodedError(
    "FAILED_PRECONDITION",
    `${HARNESS_SESSION_KIND} ${namespace}/${name} could not be auto-resumed: ${
      deleting
        ? "it is being deleted"
        : `phase ${record.phase}${ready ? `, reason ${ready.reason}: ${ready.message}` : ""}`
    }`,
    { phase: record.phase, ...(ready ? { reason: ready.reason } : {}) },
  );
}
