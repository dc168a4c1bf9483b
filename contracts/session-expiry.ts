import { z } from "zod";
import { parseDuration } from "./duration.ts";

/**
 * Expiry (issue 40): a HarnessSession may say when it ends, as `spec.ttl` (a duration counted from
 * its creation) or `spec.expiresAt` (an RFC 3339 time), not both. Once that time is reached the
 * server deletes the session as a DELETE would (its stack destroyed, the record forgotten); its
 * snapshots are kept. Either field may be changed later (to extend or shorten its life), never to
 * a time already past.
 */

/** The furthest ahead a session may end: 366 days after its creation (ttl) or after the write (expiresAt). */
export const MAX_SESSION_LIFETIME_MS = 366 * 24 * 3_600_000;

/** `spec.ttl`: a duration above 0 and up to 366 days (8784h). */
export const SessionTtl = z.string().refine(
  (text) => {
    const ms = parseDuration(text);
    return ms !== undefined && ms > 0 && ms <= MAX_SESSION_LIFETIME_MS;
  },
  {
    message:
      "must be a duration such as 30s, 2h or 168h (units ms, s, m, h), above 0 and up to 8784h (366 days)",
  },
);

/** `spec.expiresAt`: an RFC 3339 date-time with a zone (`Z` or an offset). */
export const SessionExpiresAt = z.iso.datetime({ offset: true });

type ExpirySpec = { ttl?: string | undefined; expiresAt?: string | undefined };

/** When the session ends (ISO 8601, UTC), or undefined when it has no expiry. Pure. */
export function expiryOf(spec: ExpirySpec, creationTimestamp: string): string | undefined {
  if (spec.expiresAt !== undefined) return new Date(spec.expiresAt).toISOString();
  if (spec.ttl === undefined) return undefined;
  const ms = parseDuration(spec.ttl);
  if (ms === undefined) return undefined;
  return new Date(new Date(creationTimestamp).getTime() + ms).toISOString();
}

/**
 * What the schema alone cannot say about expiry at a write at `now`: only one of ttl and
 * expiresAt; the end not already past; expiresAt at most 366 days ahead. The field violations;
 * none when the spec is fine. Pure.
 */
export function expiryViolations(
  spec: ExpirySpec,
  creationTimestamp: string,
  now: Date,
): { field: string; description: string }[] {
  if (spec.ttl !== undefined && spec.expiresAt !== undefined)
    return [{ field: "spec.expiresAt", description: "set one of spec.ttl and spec.expiresAt, not both" }];
  const field = spec.ttl !== undefined ? "spec.ttl" : "spec.expiresAt";
  const end = expiryOf(spec, creationTimestamp);
  if (end === undefined) return [];
  if (Date.parse(end) <= now.getTime()) {
    const what =
      spec.ttl !== undefined
        ? `${spec.ttl} after the session's creation (${creationTimestamp}) is ${end}`
        : `${spec.expiresAt}`;
    return [{ field, description: `must end in the future: ${what}, already past at ${now.toISOString()}` }];
  }
  if (spec.expiresAt !== undefined && Date.parse(end) - now.getTime() > MAX_SESSION_LIFETIME_MS)
    return [
      {
        field,
        description: `must be at most 366 days ahead (${new Date(now.getTime() + MAX_SESSION_LIFETIME_MS).toISOString()}); is ${spec.expiresAt}`,
      },
    ];
  return [];
}
