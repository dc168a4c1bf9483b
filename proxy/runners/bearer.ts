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
  return timingSafeEqual(a, digestOf(expected));
}

/**
 * The digests of the few expected tokens (the admin and runner tokens, compared on every request),
 * made once each: beside the token the process holds anyway, they reveal nothing more.
 */
const expectedDigests = new Map<string, Buffer>();
const EXPECTED_DIGESTS_MAX = 16;
function digestOf(expected: string): Buffer {
  let digest = expectedDigests.get(expected);
  if (!digest) {
    digest = createHash("sha256").update(expected).digest();
    if (expectedDigests.size < EXPECTED_DIGESTS_MAX) expectedDigests.set(expected, digest);
  }
  return digest;
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
