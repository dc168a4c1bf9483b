import type { Context } from "hono";

/**
 * The id the relay gave a proxied request, kept on the request's context for the audit
 * (http/request-audit.ts): the audit records this one, never an id the adapter's reply names.
 */
export const AUDITED_REQUEST_ID = "auditedRequestId" as const;

declare module "hono" {
  interface ContextVariableMap {
    /** The request id the relay gave a proxied request (markAuditedRequest). */
    auditedRequestId: string;
  }
}

/** Called by the relay once it knows the request's id (relay/request-relay.ts). */
export function markAuditedRequest(c: Context, requestId: string): void {
  c.set(AUDITED_REQUEST_ID, requestId);
}
