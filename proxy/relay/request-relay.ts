import type { RequestOutcome } from "../../contracts/adapter.ts";
import { randomBytes, randomUUID } from "node:crypto";
import type { Context } from "hono";
import { CodedError } from "../../contracts/errors.ts";
import { HARNESS_SESSION_KIND, type HarnessRequest } from "../../contracts/harness-session.ts";
import type { AutoResumer, AwakeSession } from "../harness/auto-resumer.ts";
import { readyOf } from "../harness/harness-status.ts";
import type { Logger } from "../observability/log.ts";
import { markAuditedRequest } from "../observability/audited-request.ts";
import { parseJsonBody } from "../lifecycle/request-body.ts";
import type { RunnerDirectory } from "../lifecycle/runner-directory.ts";
import type { RelayChunk } from "../lifecycle/runner-directory.ts";
import type { GatewayUsageReport } from "../../contracts/runner-protocol.ts";
import type { HarnessRecord, HarnessServing, HarnessStore } from "../store/harness-store.ts";
import type { RelayRoute, Store } from "../store/store.ts";
import { CANCEL_TIMEOUT_MS, Flight, type RelaySettings } from "./relay-flight.ts";
import { nativeFormat, type ReplyFormat, type ReplyShape } from "./reply-format.ts";
import type { BoundedCaller, CallerBounds } from "../lifecycle/caller-bounds.ts";
import type { NamespaceBounds } from "../lifecycle/namespace-bounds.ts";

/**
 * What the relay needs of the runner link: commands, the chunks of relayed replies, and the
 * model gateway's usage reports of a relayed request (issue 35).
 */
export type RelayLink = RunnerDirectory & {
  onRelayChunk(relayId: string, listener: (chunk: RelayChunk) => void): () => void;
  onRelayUsage(relayId: string, listener: (report: GatewayUsageReport) => void): () => void;
};

export type RequestRelayOptions = {
  harness: HarnessStore;
  store: Store;
  runners: RelayLink;
  log: Logger;
  /** Largest request body accepted; more is 413 RESOURCE_EXHAUSTED (AGENT_SESSIONS_REQUEST_BODY_MAX_BYTES). */
  bodyMaxBytes: number;
  /** Largest reply relayed; more ends the request, RESOURCE_EXHAUSTED (AGENT_SESSIONS_REPLY_MAX_BYTES). */
  replyMaxBytes: number;
  /** Deadline of one request, streamed or not; then 504 DEADLINE_EXCEEDED (AGENT_SESSIONS_REQUEST_TIMEOUT_MS). */
  timeoutMs: number;
  /** Auto-resume of sessions with spec.autoResume; without it a stopped session is refused. */
  autoResume?: AutoResumer | undefined;
  /**
   * Requests one API token may have in flight (AGENT_SESSIONS_REQUESTS_PER_TOKEN_MAX); one more
   * is 429 RESOURCE_EXHAUSTED before anything is counted. @default unbounded
   */
  perToken?: CallerBounds | undefined;
  /**
   * Requests to the sessions of one namespace in flight, whichever token sent them
   * (AGENT_SESSIONS_REQUESTS_PER_NAMESPACE_MAX); one more is 429 RESOURCE_EXHAUSTED before
   * anything is counted. @default unbounded
   */
  perNamespace?: NamespaceBounds | undefined;
  /**
   * Told when the runner could not relay a request to the session's adapter at all
   * (FAILED_PRECONDITION or UNAVAILABLE from the runner, not the adapter's own answer): the
   * controller probes the relay path again and takes Ready back until it serves.
   * @default nothing
   */
  onRelayPathFailed?: (namespace: string, name: string) => void;
  /**
   * Told once each request is settled, with its outcome and the agent session it was admitted to
   * (issue 42: request outcomes are events on the session's stream). @default nothing
   */
  onRequestFinished?: (
    session: { namespace: string; name: string; session_id: string | undefined },
    requestId: string,
    outcome: RequestOutcome,
  ) => void;
  /** @default () => new Date() */
  now?: () => Date;
};

/**
 * `POST /v1/namespaces/{ns}/harnesssessions/{name}/requests`: relays one request client →
 * server → runner (`relay` command) → the session's v1alpha2 adapter, and the reply back as the
 * runner's `relay_chunk`s. The target (container, runner) comes only from the store. Only Ready
 * sessions admit requests; admission and the per-request accounting are single atomic store
 * statements. A streamed reply passes through as SSE event by event, each write awaited (the
 * client's pace is the relay's). A client that goes away cancels the upstream work
 * (`cancel_relay`). Body, reply and time are bounded, each with its own clear error.
 */
export class RequestRelay {
  readonly #o: RelaySettings;
  readonly #autoResume: AutoResumer | undefined;
  readonly #perToken: CallerBounds | undefined;
  readonly #perNamespace: NamespaceBounds | undefined;

  constructor(options: RequestRelayOptions) {
    const { autoResume, perToken, perNamespace, ...rest } = options;
    this.#autoResume = autoResume;
    this.#perToken = perToken;
    this.#perNamespace = perNamespace;
    this.#o = {
      onRelayPathFailed: () => {},
      onRequestFinished: () => {},
      now: () => new Date(),
      ...rest,
    };
  }

  /**
   * @param format how the body asks and the reply answers (reply-format.ts); everything else is
   * the same whatever the format. @default nativeFormat (`…/requests`)
   */
  async relay(
    c: Context,
    namespace: string,
    name: string,
    format: ReplyFormat = nativeFormat,
  ): Promise<Response> {
    const text = await readLimited(c.req.raw, this.#o.bodyMaxBytes);
    if (text === undefined)
      return c.json(
        {
          code: "RESOURCE_EXHAUSTED",
          message: `the request body exceeds ${this.#o.bodyMaxBytes} bytes`,
          details: { limit_bytes: this.#o.bodyMaxBytes },
        },
        413,
      );
    const { request, reply } = format(parseJsonBody(text));
    const requestId = request.id ?? `req-${randomBytes(8).toString("hex")}`;
    markAuditedRequest(c, requestId);
    // Only what serving needs is read (a Ready session's phase, workspace and agent session, its
    // workspace's runner and protocol); a session that is not Ready is read whole below.
    let serving = await this.#o.harness.getServing(namespace, name);
    if (!serving) throw new CodedError("NOT_FOUND", `${HARNESS_SESSION_KIND} ${namespace}/${name} not found`);
    let route = await this.#routeOf(serving);
    // Bad input is refused before anything is resumed.
    if (route) this.#assertStreamable(request.stream, route, namespace, name);
    // The token's and the namespace's slots are held until the request settles (the Flight gives
    // them back), else below.
    const slot = { release: this.#acquire(c.get("principal"), namespace), flying: false };
    let awake: AwakeSession | undefined;
    try {
      if (serving.phase !== "Ready" && this.#autoResume) {
        const record = await this.#o.harness.getHarnessSession(namespace, name);
        if (!record)
          throw new CodedError("NOT_FOUND", `${HARNESS_SESSION_KIND} ${namespace}/${name} not found`);
        awake = await this.#autoResume.awaitReady(record, requestId, c.req.raw.signal);
        serving = awake?.record ?? record;
        route = await this.#routeOf(serving);
      }
      return await this.#admit(c, serving, route, request, requestId, reply, slot);
    } finally {
      // Admitted (activeRequests holds the session awake from here) or refused.
      awake?.release();
      if (!slot.flying) slot.release();
    }
  }

  async #admit(
    c: Context,
    serving: HarnessServing,
    route: RelayRoute | undefined,
    request: HarnessRequest,
    requestId: string,
    reply: ReplyShape,
    slot: { release: () => void; flying: boolean },
  ): Promise<Response> {
    const { namespace, name } = serving;
    if (!route || serving.phase !== "Ready") throw await this.#notReady(namespace, name);
    this.#assertStreamable(request.stream, route, namespace, name);
    const relayId = randomUUID();
    const begun = await this.#o.harness.beginRequest({
      namespace,
      name,
      request_id: requestId,
      relay_id: relayId,
      runner_id: route.runner_id,
      container_name: route.container_name,
      now: this.#now(),
    });
    if (!begun.ok) {
      switch (begun.reason) {
        case "not-found":
          throw new CodedError("NOT_FOUND", `${HARNESS_SESSION_KIND} ${namespace}/${name} not found`);
        case "not-ready":
          throw notReady(namespace, name, begun.session);
        case "duplicate":
          throw new CodedError("ALREADY_EXISTS", `request ${requestId} exists in ${namespace}/${name}`, {
            request_id: requestId,
          });
        default: {
          const exhaustive: never = begun;
          return exhaustive;
        }
      }
    }
    const flight = new Flight(this.#o, c, {
      namespace,
      name,
      sessionId: serving.session_id,
      requestId,
      relayId,
      route,
      reply,
      onSettled: slot.release,
    });
    slot.flying = true;
    flight.start({ id: requestId, input: request.input, stream: request.stream });
    return request.stream ? flight.streamed() : flight.whole();
  }

  /** The token's slot, then the namespace's; a refusal of the second gives the first back. */
  #acquire(caller: BoundedCaller | undefined, namespace: string): () => void {
    const releaseToken = this.#perToken?.acquire(caller) ?? (() => {});
    try {
      const releaseNamespace = this.#perNamespace?.acquire(caller, [namespace]) ?? (() => {});
      return () => {
        releaseNamespace();
        releaseToken();
      };
    } catch (error) {
      releaseToken();
      throw error;
    }
  }

  async #routeOf(serving: HarnessServing): Promise<RelayRoute | undefined> {
    return serving.container_name === undefined
      ? undefined
      : this.#o.store.getRelayRoute(serving.container_name);
  }

  /** FAILED_PRECONDITION, saying why from the whole record as it is now; NOT_FOUND when gone. */
  async #notReady(namespace: string, name: string): Promise<CodedError> {
    const record = await this.#o.harness.getHarnessSession(namespace, name);
    return record
      ? notReady(namespace, name, record)
      : new CodedError("NOT_FOUND", `${HARNESS_SESSION_KIND} ${namespace}/${name} not found`);
  }

  #assertStreamable(stream: boolean, route: RelayRoute, namespace: string, name: string): void {
    if (stream && !route.streaming)
      throw new CodedError(
        "INVALID_ARGUMENT",
        `the runtime of ${HARNESS_SESSION_KIND} ${namespace}/${name} does not declare streaming; send stream: false`,
      );
  }

  /** `POST …/requests/{id}/cancel`: asks the runner to cancel the request at the adapter. */
  async cancel(
    namespace: string,
    name: string,
    requestId: string,
  ): Promise<{ id: string; cancelling: true }> {
    const request = await this.#o.harness.markCancelRequested(namespace, name, requestId, this.#now());
    if (!request) {
      const known = await this.#o.harness.getRequest(namespace, name, requestId);
      if (!known) throw new CodedError("NOT_FOUND", `request ${requestId} not found in ${namespace}/${name}`);
      throw new CodedError(
        "FAILED_PRECONDITION",
        `request ${requestId} already finished (${known.outcome ?? "unknown"})`,
        { outcome: known.outcome },
      );
    }
    const outcome = await this.#o.runners.command(
      request.runner_id,
      {
        kind: "cancel_relay",
        container_name: request.container_name,
        relay_id: request.relay_id,
        request_id: requestId,
      },
      CANCEL_TIMEOUT_MS,
    );
    if (!outcome.ok)
      throw new CodedError(
        outcome.error.code,
        `cancelling request ${requestId} failed: ${outcome.error.message}`,
      );
    return { id: requestId, cancelling: true };
  }

  #now(): string {
    return this.#o.now().toISOString();
  }
}

function notReady(
  namespace: string,
  name: string,
  record: Pick<HarnessRecord, "phase" | "conditions" | "spec">,
): CodedError {
  const ready = readyOf(record.conditions);
  // With autoResume, a session the user stopped stays stopped: say why the request did not resume it.
  const hint =
    record.spec.autoResume === true && record.spec.desiredState === "stopped"
      ? "; spec.autoResume does not override desiredState: stopped (set desiredState: running)"
      : "";
  return new CodedError(
    "FAILED_PRECONDITION",
    `${HARNESS_SESSION_KIND} ${namespace}/${name} is not Ready (phase ${record.phase}${ready ? `, reason ${ready.reason}` : ""}); only Ready sessions accept requests${hint}`,
    { phase: record.phase, ...(ready ? { reason: ready.reason } : {}) },
  );
}

/** The body as text, or undefined when it exceeds `max` bytes (reading stops there). */
async function readLimited(request: Request, max: number): Promise<string | undefined> {
  const declared = Number(request.headers.get("content-length") ?? Number.NaN);
  if (declared > max) return undefined;
  // A declared length bounds the body (HTTP framing): read it whole, the HTTP server's direct
  // path (no web stream). Without one (chunked), count while reading.
  if (Number.isInteger(declared) && declared >= 0) {
    const text = await request.text();
    return Buffer.byteLength(text) > max ? undefined : text;
  }
  if (!request.body) return "";
  const reader = request.body.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.byteLength;
    if (size > max) {
      await reader.cancel().catch(() => undefined);
      return undefined;
    }
    chunks.push(value);
  }
  return Buffer.concat(chunks).toString("utf8");
}
