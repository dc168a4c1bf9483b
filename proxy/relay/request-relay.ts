import { randomBytes, randomUUID } from "node:crypto";
import type { Context } from "hono";
import { type SSEStreamingApi, streamSSE } from "hono/streaming";
import { type RequestOutcome, ResultRecord, StreamEvent, type Usage } from "../../contracts/adapter.ts";
import { type ApiErrorBody, CodedError, ErrorCode, httpStatusOf } from "../../contracts/errors.ts";
import { HARNESS_SESSION_KIND, HarnessRequest } from "../../contracts/harness-session.ts";
import type { AutoResumer, AwakeSession } from "../harness/auto-resumer.ts";
import { readyOf } from "../harness/harness-status.ts";
import type { Logger } from "../observability/log.ts";
import { type InboxEvent, REPLY_TOO_LARGE, RelayInbox } from "./relay-inbox.ts";
import { markAuditedReply, markAuditedRequest } from "../observability/audited-request.ts";
import { parseInput, parseJsonBody } from "../lifecycle/request-body.ts";
import type { RunnerDirectory } from "../lifecycle/runner-directory.ts";
import type { RelayChunk } from "../lifecycle/runner-directory.ts";
import { SseSplitter } from "./sse-splitter.ts";
import type { HarnessRecord, HarnessStore } from "../store/harness-store.ts";
import type { Store, WorkspaceRecord } from "../store/store.ts";

/** What the relay needs of the runner link: commands, and the chunks of relayed replies. */
export type RelayLink = RunnerDirectory & {
  onRelayChunk(relayId: string, listener: (chunk: RelayChunk) => void): () => void;
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
   * Told when the runner could not relay a request to the session's adapter at all
   * (FAILED_PRECONDITION or UNAVAILABLE from the runner, not the adapter's own answer): the
   * controller probes the relay path again and takes Ready back until it serves.
   * @default nothing
   */
  onRelayPathFailed?: (namespace: string, name: string) => void;
  /** @default () => new Date() */
  now?: () => Date;
};

/** The options with their defaults, as a flight uses them. */
type RelaySettings = Required<Omit<RequestRelayOptions, "autoResume">>;

/** The runner's own deadline is a little later, so the server's decides (and says DEADLINE_EXCEEDED). */
const RUNNER_DEADLINE_GRACE_MS = 1_000;
/**
 * Largest error body read from an adapter that refused a streamed request: a refusal is a short
 * `{code, message}`; more is an adapter gone wrong, and the request ends RESOURCE_EXHAUSTED.
 */
export const ERROR_BODY_MAX_BYTES = 64 * 1024;
const CANCEL_TIMEOUT_MS = 10_000;

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

  constructor(options: RequestRelayOptions) {
    const { autoResume, ...rest } = options;
    this.#autoResume = autoResume;
    this.#o = {
      onRelayPathFailed: () => {},
      now: () => new Date(),
      ...rest,
    };
  }

  async relay(c: Context, namespace: string, name: string): Promise<Response> {
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
    const request = parseInput(HarnessRequest, parseJsonBody(text), "request");
    const requestId = request.id ?? `req-${randomBytes(8).toString("hex")}`;
    markAuditedRequest(c, requestId);
    let record = await this.#o.harness.getHarnessSession(namespace, name);
    if (!record) throw new CodedError("NOT_FOUND", `${HARNESS_SESSION_KIND} ${namespace}/${name} not found`);
    let workspace = await this.#workspaceOf(record);
    // Bad input is refused before anything is resumed.
    if (workspace) this.#assertStreamable(request.stream, workspace, namespace, name);
    let awake: AwakeSession | undefined;
    if (record.phase !== "Ready" && this.#autoResume) {
      awake = await this.#autoResume.awaitReady(record, requestId, c.req.raw.signal);
      if (awake) {
        record = awake.record;
        workspace = await this.#workspaceOf(record);
      }
    }
    try {
      return await this.#admit(c, record, workspace, request, requestId);
    } finally {
      // Admitted (activeRequests holds the session awake from here) or refused.
      awake?.release();
    }
  }

  async #admit(
    c: Context,
    record: HarnessRecord,
    workspace: WorkspaceRecord | undefined,
    request: HarnessRequest,
    requestId: string,
  ): Promise<Response> {
    const { namespace, name } = record;
    if (!workspace || record.phase !== "Ready") throw notReady(namespace, name, record);
    this.#assertStreamable(request.stream, workspace, namespace, name);
    const relayId = randomUUID();
    const begun = await this.#o.harness.beginRequest({
      namespace,
      name,
      request_id: requestId,
      relay_id: relayId,
      runner_id: workspace.runner_id,
      container_name: workspace.container_name,
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
    const flight = new Flight(this.#o, c, { namespace, name, requestId, relayId, workspace });
    flight.start({ id: requestId, input: request.input, stream: request.stream });
    return request.stream ? flight.streamed() : flight.whole();
  }

  async #workspaceOf(record: HarnessRecord): Promise<WorkspaceRecord | undefined> {
    return record.container_name === undefined
      ? undefined
      : this.#o.store.getWorkspace(record.container_name);
  }

  #assertStreamable(stream: boolean, workspace: WorkspaceRecord, namespace: string, name: string): void {
    if (stream && !workspace.spec.streaming)
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

type FlightTarget = {
  namespace: string;
  name: string;
  requestId: string;
  relayId: string;
  workspace: WorkspaceRecord;
};

/** One relayed request in flight: its inbox, deadline, cancellation and its settlement (once). */
class Flight {
  readonly #o: RelaySettings;
  readonly #c: Context;
  readonly #t: FlightTarget;
  readonly #inbox: RelayInbox;
  #unsubscribe: () => void = () => {};
  #timer: NodeJS.Timeout | undefined;
  #cancelSent = false;
  #clientGone = false;
  #settled = false;
  #result: ResultRecord | undefined;
  readonly #onClientAbort = () => {
    this.#clientGone = true;
    this.#inbox.fail({ code: "CANCELLED", message: "the client went away" });
    this.#cancelUpstream("client disconnected");
  };

  constructor(options: RelaySettings, c: Context, target: FlightTarget) {
    this.#o = options;
    this.#c = c;
    this.#t = target;
    this.#inbox = new RelayInbox({
      maxBytes: options.replyMaxBytes,
      onOverflow: () => this.#cancelUpstream("reply too large"),
    });
  }

  start(request: { id: string; input: string; stream: boolean }): void {
    const { workspace, relayId } = this.#t;
    // Subscribe before the command leaves: the first chunk may come back at once.
    this.#unsubscribe = this.#o.runners.onRelayChunk(relayId, (chunk) => this.#inbox.push(chunk));
    this.#timer = setTimeout(() => {
      this.#inbox.fail({
        code: "DEADLINE_EXCEEDED",
        message: `the request took longer than ${this.#o.timeoutMs} ms`,
      });
      this.#cancelUpstream("deadline");
    }, this.#o.timeoutMs);
    this.#c.req.raw.signal.addEventListener("abort", this.#onClientAbort, { once: true });
    if (this.#c.req.raw.signal.aborted) this.#onClientAbort();
    const timeoutMs = this.#o.timeoutMs + RUNNER_DEADLINE_GRACE_MS;
    this.#o.runners
      .command(
        workspace.runner_id,
        {
          kind: "relay",
          container_name: workspace.container_name,
          relay_id: relayId,
          request,
          timeout_ms: timeoutMs,
          reply_max_bytes: this.#o.replyMaxBytes,
        },
        timeoutMs + 5_000,
      )
      .then(
        (outcome) => {
          if (!outcome.ok) {
            if (outcome.error.code === "FAILED_PRECONDITION" || outcome.error.code === "UNAVAILABLE")
              this.#o.onRelayPathFailed(this.#t.namespace, this.#t.name);
            this.#inbox.fail(outcome.error);
          } else
            this.#inbox.fail({ code: "INTERNAL", message: "the runner ended the relay without a reply" });
        },
        (error: unknown) => this.#inbox.fail({ code: "INTERNAL", message: String(error) }),
      );
  }

  /** A non-streamed reply: the adapter's result record (or its error), once complete. */
  async whole(): Promise<Response> {
    let status: number | undefined;
    let body = "";
    let failure: ApiErrorBody | undefined;
    try {
      for (;;) {
        const event = await this.#inbox.next();
        if (event.kind === "error") {
          failure = event.error;
          break;
        }
        status ??= event.status;
        body += event.data;
        if (event.done) break;
      }
      if (failure) return this.#errorResponse(await this.#explain(failure));
      const parsed = parseJson(body);
      const record =
        status === 200 || status === 499 || status === 502 ? ResultRecord.safeParse(parsed) : undefined;
      if (record?.success) {
        this.#result = record.data;
        const [reply, status] = resultResponse(this.#t.requestId, record.data);
        markAuditedReply(this.#c, reply);
        return this.#c.json(reply, status);
      }
      return this.#errorResponse(adapterError(status, parsed));
    } finally {
      await this.#settle();
    }
  }

  /**
   * A streamed reply. The adapter's SSE events are re-emitted one by one (`event: delta`,
   * `event: result`), each write awaited; a failure after the first byte is `event: error`.
   * A failure before it is a plain JSON error. Settled exactly once whatever happens: here in
   * `finally` until the SSE stream takes over, then in the stream's own `finally`.
   */
  async streamed(): Promise<Response> {
    let handedOver = false;
    try {
      const first = await this.#inbox.next();
      if (first.kind === "error") return this.#errorResponse(await this.#explain(first.error));
      if (first.status !== 200) return this.#errorResponse(await this.#refusal(first));
      const response = streamSSE(this.#c, (sse) => this.#pipeSse(sse, first));
      handedOver = true;
      return response;
    } finally {
      if (!handedOver) await this.#settle();
    }
  }

  /**
   * The adapter refused a streamed request (its error body follows): read that body, at most
   * ERROR_BODY_MAX_BYTES of it, and answer like a non-streamed request.
   */
  async #refusal(first: Extract<InboxEvent, { kind: "chunk" }>): Promise<ApiErrorBody> {
    const parts = [first.data];
    for (let event = first; !event.done; ) {
      if (this.#inbox.bytes > ERROR_BODY_MAX_BYTES) {
        this.#cancelUpstream("error reply too large");
        return {
          code: "RESOURCE_EXHAUSTED",
          message: `the agent's error reply (HTTP ${first.status ?? "?"}) exceeds ${ERROR_BODY_MAX_BYTES} bytes`,
          details: { limit_bytes: ERROR_BODY_MAX_BYTES, status: first.status, reason: REPLY_TOO_LARGE },
        };
      }
      const next = await this.#inbox.next();
      if (next.kind === "error") return this.#explain(next.error);
      parts.push(next.data);
      event = next;
    }
    return adapterError(first.status, parseJson(parts.join("")));
  }

  async #pipeSse(sse: SSEStreamingApi, first: Extract<InboxEvent, { kind: "chunk" }>): Promise<void> {
    sse.onAbort(this.#onClientAbort);
    const splitter = new SseSplitter();
    try {
      for (let event: InboxEvent = first; ; ) {
        if (event.kind === "error") {
          await sse.writeSSE({ event: "error", data: JSON.stringify(await this.#explain(event.error)) });
          return;
        }
        for (const data of splitter.push(event.data)) {
          const parsed = StreamEvent.safeParse(parseJson(data));
          if (!parsed.success) continue; // not part of the contract: never forwarded
          if (parsed.data.type === "result") this.#result = parsed.data.result;
          await sse.writeSSE({ event: parsed.data.type, data: JSON.stringify(parsed.data) });
        }
        if (event.done) return;
        event = await this.#inbox.next();
      }
    } catch (error) {
      // The client's writer failed: it went away.
      this.#onClientAbort();
      this.#o.log("debug", "streamed reply ended by the client", { error: String(error) });
    } finally {
      await this.#settle();
    }
  }

  /**
   * A failure without a result record, as the client should read it: a request the client
   * cancelled (or left) was cancelled, whatever the relay then reported.
   */
  async #explain(failure: ApiErrorBody): Promise<ApiErrorBody> {
    if (failure.code === "DEADLINE_EXCEEDED" || failure.code === "RESOURCE_EXHAUSTED") return failure;
    if (!(await this.#cancelled())) return failure;
    return { code: "CANCELLED", message: `request ${this.#t.requestId} was cancelled` };
  }

  /** The client left, or asked to cancel (possibly through another server replica). */
  async #cancelled(): Promise<boolean> {
    if (this.#clientGone) return true;
    const { namespace, name, requestId } = this.#t;
    const record = await this.#o.harness.getRequest(namespace, name, requestId);
    return record?.cancel_requested_at !== undefined;
  }

  #errorResponse(error: ApiErrorBody): Response {
    // A reply that outgrew its bound is the upstream's fault, not a quota of the client's.
    const status = error.details?.reason === REPLY_TOO_LARGE ? 502 : httpStatusOf[error.code];
    markAuditedReply(this.#c, error);
    return this.#c.json(error, status as 400);
  }

  #cancelUpstream(why: string): void {
    if (this.#cancelSent || this.#settled) return;
    this.#cancelSent = true;
    const { workspace, relayId, requestId } = this.#t;
    this.#o.runners
      .command(
        workspace.runner_id,
        {
          kind: "cancel_relay",
          container_name: workspace.container_name,
          relay_id: relayId,
          request_id: requestId,
        },
        CANCEL_TIMEOUT_MS,
      )
      .then(
        (outcome) => {
          if (!outcome.ok)
            this.#o.log("warn", "cancel_relay failed", { request_id: requestId, why, error: outcome.error });
        },
        (error: unknown) =>
          this.#o.log("error", "cancel_relay threw", { request_id: requestId, error: String(error) }),
      );
  }

  /** Account for the request exactly once, with the adapter's record or what is known without it. */
  async #settle(): Promise<void> {
    if (this.#settled) return;
    this.#settled = true;
    clearTimeout(this.#timer);
    this.#unsubscribe();
    this.#c.req.raw.signal.removeEventListener("abort", this.#onClientAbort);
    const { namespace, name, requestId } = this.#t;
    let outcome: RequestOutcome;
    let usage: Usage = "unavailable";
    if (this.#result) {
      outcome = this.#result.outcome;
      usage = this.#result.usage;
    } else outcome = (await this.#cancelled()) ? "cancelled" : "failed";
    await this.#o.harness.finishRequest({
      namespace,
      name,
      request_id: requestId,
      outcome,
      usage,
      now: this.#o.now().toISOString(),
    });
  }
}

/** A finished result record as the HTTP answer: 200, or an error body carrying the record. */
function resultResponse(requestId: string, record: ResultRecord): [unknown, 400] {
  switch (record.outcome) {
    case "succeeded":
      return [record, 200 as 400];
    case "cancelled":
      return [
        { code: "CANCELLED", message: `request ${requestId} was cancelled`, details: { result: record } },
        httpStatusOf.CANCELLED as 400,
      ];
    case "failed":
      return [
        {
          code: "UNAVAILABLE",
          message: `the agent could not complete request ${requestId}: ${record.error ?? "failed"}`,
          details: { result: record },
        },
        httpStatusOf.UNAVAILABLE as 400,
      ];
    default: {
      const exhaustive: never = record.outcome;
      return exhaustive;
    }
  }
}

/** An adapter's refusal (`{code, message}` with its status) as our error; its own code when canonical. */
function adapterError(status: number | undefined, body: unknown): ApiErrorBody {
  const b = body as { code?: unknown; message?: unknown } | undefined;
  const code = ErrorCode.safeParse(b?.code);
  if (status === 401)
    return { code: "INTERNAL", message: "the session's adapter refused the runner's token" };
  if (code.success && code.data !== "UNAUTHENTICATED")
    return { code: code.data, message: `the agent refused the request: ${String(b?.message ?? code.data)}` };
  return { code: "UNAVAILABLE", message: `the agent answered HTTP ${status ?? "?"} without a result` };
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

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}
