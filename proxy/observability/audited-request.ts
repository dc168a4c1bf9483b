import type { Context } from "hono";

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

declare module "hono" {
  interface ContextVariableMap {
    /** The request id the relay gave a proxied request (markAuditedRequest). */
    auditedRequestId: string;
    /** The JSON body of the relay's answer (markAuditedReply). */
    auditedReply: { body: unknown };
    /** How the relay's streamed answer ended (markAuditedStreamEnd). */
    auditedStreamEnd: { body: unknown };
  }
}

/** Called by the relay once it knows the request's id (relay/request-relay.ts). */
export function markAuditedRequest(c: Context, requestId: string): void {
  c.set(AUDITED_REQUEST_ID, requestId);
}

/** Called by the relay with the JSON body it answers with (relay/request-relay.ts). */
export function markAuditedReply(c: Context, body: unknown): void {
  c.set(AUDITED_REPLY, { body });
}

/** Called by the relay when a streamed answer ends, with its last event in our shape (relay/relay-flight.ts). */
export function markAuditedStreamEnd(c: Context, body: unknown): void {
  c.set(AUDITED_STREAM_END, { body });
}
