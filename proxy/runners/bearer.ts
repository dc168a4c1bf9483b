import { createHash, timingSafeEqual } from "node:crypto";

/** The token of an `Authorization: Bearer <token>` header (RFC 6750 §2.1), or undefined. */
export function bearerToken(header: string | undefined | null): string | undefined {
  const match = header?.match(/^Bearer\s+(\S+)\s*$/i);
  return match?.[1];
}

/** Constant-time comparison (hashing first makes the lengths equal). */
export function sameToken(given: string | undefined, expected: string): boolean {
  if (given === undefined) return false;
  const a = createHash("sha256").update(given).digest();
  const b = createHash("sha256").update(expected).digest();
  return timingSafeEqual(a, b);
}

export type Caller = "admin" | "runner" | "unknown" | "anonymous";

/** Which of the two credentials a request carries: they are never interchangeable. */
export function identifyCaller(
  header: string | undefined | null,
  tokens: { adminToken: string; runnerToken: string },
): Caller {
  const token = bearerToken(header);
  if (token === undefined) return "anonymous";
  if (sameToken(token, tokens.adminToken)) return "admin";
  if (sameToken(token, tokens.runnerToken)) return "runner";
  return "unknown";
}
