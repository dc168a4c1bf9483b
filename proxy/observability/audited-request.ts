import type { Context } from "hono";
import type { ResultRecord } from "../../contracts/adapter.ts";
import type { ErrorCode } from "../../contracts/errors.ts";
import type { AuditRecord } from "./audit.ts";

/** How a proxied request ended, as the audit records it. */
export type AuditedEnding = Pick<AuditRecord, "outcome" | "code" | "usage" | "request_id">;

/**
 * The id the relay gave a proxied request, kept on the request's context for the audit
 * (http/request-audit.ts): the audit records this one, never an id the adapter's reply names.
 */
export const AUDITED_REQUEST_ID = "auditedRequestId" as const;

/**
 * The JSON body the relay answered a proxied request with (markAuditedReply): the audit reads
 * it here instead of cloning the response and parsing it again (a clone also takes the reply
 * off the HTTP server's direct path for string bodies).
 */
export const AUDITED_REPLY = "auditedReply" as const;

/**
 * How a streamed reply ended, as our own stream says it (`{type: "result", result}` or an error
 * body): the audit reads it when the stream's events are in another shape (OpenAI's chunks).
 */
export const AUDITED_STREAM_END = "auditedStreamEnd" as const;

/**
 * Set by the relay when it answers with a stream whose end it marks (markAuditedStreamEnd): the
 * audit then takes the ending from the mark and does not parse the stream's events on their way.
 */
export const AUDITED_STREAM_END_MARKED = "auditedStreamEndMarked" as const;

declare module "hono" {
  interface ContextVariableMap {
    /** The request id the relay gave a proxied request (markAuditedRequest). */
    auditedRequestId: string;
    /** The JSON body of the relay's answer (markAuditedReply), and its ending when the relay knows it. */
    auditedReply: { body: unknown; ending?: AuditedEnding | undefined };
    /** How the relay's streamed answer ended (markAuditedStreamEnd). */
    auditedStreamEnd: { body: unknown; ending?: AuditedEnding | undefined };
    /** The relay marks how its stream ends (markAuditedStreamEndMarked). */
    auditedStreamEndMarked: true;
  }
}

/**
 * The ending a result record the relay built itself says (its outcome, usage and id; `code` the
 * error code it is answered with when it did not succeed): the audit need not parse it again.
 */
export function resultEnding(record: ResultRecord, code?: ErrorCode): AuditedEnding {
  return { outcome: record.outcome, code, usage: record.usage, request_id: record.id };
}

/** Called by the relay once it knows the request's id (relay/request-relay.ts). */
export function markAuditedRequest(c: Context, requestId: string): void {
  c.set(AUDITED_REQUEST_ID, requestId);
}

/** Called by the relay with the JSON body it answers with (relay/request-relay.ts), and its ending when known. */
export function markAuditedReply(c: Context, body: unknown, ending?: AuditedEnding): void {
  c.set(AUDITED_REPLY, { body, ending });
}

/**
 * Called by the relay when a streamed answer ends, with its last event in our shape
 * (relay/relay-flight.ts), and its ending when known.
 */
export function markAuditedStreamEnd(c: Context, body: unknown, ending?: AuditedEnding): void {
  c.set(AUDITED_STREAM_END, { body, ending });
}

/** Called by the relay when it answers with a stream whose every ending it marks (markAuditedStreamEnd). */
export function markAuditedStreamEndMarked(c: Context): void {
  c.set(AUDITED_STREAM_END_MARKED, true);
}
