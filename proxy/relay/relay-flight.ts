/**
 * One relayed request in flight (request-relay.ts admits it): the relay command to the runner, the
 * reply back through its inbox (whole or as SSE), the deadline, cancellation upstream, and the
 * request's settlement in the store, exactly once.
 */
import type { Context } from "hono";
import { type SSEStreamingApi, streamSSE } from "hono/streaming";
import { type RequestOutcome, ResultRecord, StreamEvent, type Usage } from "../../contracts/adapter.ts";
import { type ApiErrorBody, ErrorCode, httpStatusOf } from "../../contracts/errors.ts";
import { type InboxEvent, REPLY_TOO_LARGE, RelayInbox } from "./relay-inbox.ts";
import {
  markAuditedReply,
  markAuditedStreamEnd,
  markAuditedStreamEndMarked,
  resultEnding,
} from "../observability/audited-request.ts";
import { SseSplitter } from "./sse-splitter.ts";
import { claimedUsage, GatewayTally } from "./gateway-tally.ts";
import type { ReplyShape } from "./reply-format.ts";
import type { RelayRoute } from "../store/store.ts";
import type { RequestRelayOptions } from "./request-relay.ts";

/** The options with their defaults, as a flight uses them. */
export type RelaySettings = Required<Omit<RequestRelayOptions, "autoResume" | "perToken" | "perNamespace">>;

/** The runner's own deadline is a little later, so the server's decides (and says DEADLINE_EXCEEDED). */
const RUNNER_DEADLINE_GRACE_MS = 1_000;
/**
 * Largest error body read from an adapter that refused a streamed request: a refusal is a short
 * `{code, message}`; more is an adapter gone wrong, and the request ends RESOURCE_EXHAUSTED.
 */
export const ERROR_BODY_MAX_BYTES = 64 * 1024;
export const CANCEL_TIMEOUT_MS = 10_000;

type FlightTarget = {
  namespace: string;
  name: string;
  /** The agent session the request was admitted to (its RequestFinished event goes there). */
  sessionId: string | undefined;
  requestId: string;
  relayId: string;
  route: RelayRoute;
  /** The reply's shape (reply-format.ts): ours on `…/requests`, OpenAI's on its route. */
  reply: ReplyShape;
  /** Called once the request is settled (its per-token slot is given back). */
  onSettled?: () => void;
};

/** One relayed request in flight: its inbox, deadline, cancellation and its settlement (once). */
export class Flight {
  readonly #o: RelaySettings;
  readonly #c: Context;
  readonly #t: FlightTarget;
  readonly #inbox: RelayInbox;
  #unsubscribe: () => void = () => {};
  /** The model calls the runner's gateway reported for this request. */
  readonly #tally = new GatewayTally();
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
    const { route, relayId } = this.#t;
    // Subscribe before the command leaves: the first chunk may come back at once.
    const chunks = this.#o.runners.onRelayChunk(relayId, (chunk) => this.#inbox.push(chunk));
    const usage = this.#o.runners.onRelayUsage(relayId, (report) => this.#tally.add(report));
    this.#unsubscribe = () => {
      chunks();
      usage();
    };
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
        route.runner_id,
        {
          kind: "relay",
          container_name: route.container_name,
          relay_id: relayId,
          request,
          ...(route.protocol ? { protocol: route.protocol } : {}),
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
        // The whole reply is here: the runner sent the gateway's reports of it before its end.
        const served = this.#tally.served(record.data);
        const [reply, status] = resultResponse(this.#t.requestId, served);
        // The audit reads our own shape whatever the client is answered with, and the ending
        // from the record built here (not parsed again).
        markAuditedReply(
          this.#c,
          reply,
          resultEnding(served, served.outcome === "succeeded" ? undefined : (reply as ApiErrorBody).code),
        );
        if (served.outcome === "succeeded") return this.#c.json(this.#t.reply.whole(served) as object, 200);
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
      // Every way the stream ends is marked for the audit (#pipeSse), or it failed or was cancelled.
      markAuditedStreamEndMarked(this.#c);
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
    // The `result` event waits for the relay's end: the gateway's usage of the request's model
    // calls is known by then (the runner sends it before the final chunk), not before.
    const shape = this.#t.reply;
    const result = () => (this.#result ? this.#tally.served(this.#result) : undefined);
    try {
      for (let event: InboxEvent = first; ; ) {
        if (event.kind === "error") {
          const error = await this.#explain(event.error);
          markAuditedStreamEnd(this.#c, error);
          await sse.write(shape.error(error, result()));
          return;
        }
        // The events of every relayed chunk already here leave in one write (one syscall, one
        // wake-up of the client, not one per chunk: the runner's pieces of one read arrive
        // together); the write is awaited before more are taken.
        let text = "";
        let done = false;
        let pending: InboxEvent | undefined = event;
        while (pending?.kind === "chunk") {
          for (const data of splitter.push(pending.data)) {
            const parsed = StreamEvent.safeParse(parseJson(data));
            if (!parsed.success) continue; // not part of the contract: never forwarded
            if (parsed.data.type === "result") this.#result = parsed.data.result;
            else text += shape.event(parsed.data);
          }
          done = pending.done;
          pending = done ? undefined : this.#inbox.ready();
        }
        if (done) {
          const served = result();
          if (served) markAuditedStreamEnd(this.#c, { type: "result", result: served }, resultEnding(served));
          text += shape.end(served);
        }
        if (text !== "") await sse.write(text);
        if (done) return;
        // A failure already here is written next; else wait for the next chunk.
        event = pending ?? (await this.#inbox.next());
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
    const { route, relayId, requestId } = this.#t;
    this.#o.runners
      .command(
        route.runner_id,
        {
          kind: "cancel_relay",
          container_name: route.container_name,
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
    this.#t.onSettled?.();
    clearTimeout(this.#timer);
    this.#unsubscribe();
    this.#c.req.raw.signal.removeEventListener("abort", this.#onClientAbort);
    const { namespace, name, requestId } = this.#t;
    let outcome: RequestOutcome;
    let usage: Usage = "unavailable";
    if (this.#result) {
      outcome = this.#result.outcome;
      // The adapter's claim (status.claimedUsage); the gateway's reports count on their own.
      usage = claimedUsage(this.#result);
    } else outcome = (await this.#cancelled()) ? "cancelled" : "failed";
    await this.#o.harness.finishRequest({
      namespace,
      name,
      request_id: requestId,
      outcome,
      usage,
      now: this.#o.now().toISOString(),
    });
    this.#o.onRequestFinished?.({ namespace, name, session_id: this.#t.sessionId }, requestId, outcome);
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

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}
