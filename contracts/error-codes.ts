/**
 * The gRPC canonical codes the API, the runner link and the CLI use, and their HTTP statuses, as
 * plain values: what a browser bundle (the web UI's client/) needs without zod. contracts/errors.ts
 * builds its schema from these.
 */
export const ERROR_CODES = [
  "INVALID_ARGUMENT",
  "NOT_FOUND",
  "ALREADY_EXISTS",
  "FAILED_PRECONDITION",
  "ABORTED",
  "UNAUTHENTICATED",
  "PERMISSION_DENIED",
  "RESOURCE_EXHAUSTED",
  "DEADLINE_EXCEEDED",
  "CANCELLED",
  "UNAVAILABLE",
  "UNIMPLEMENTED",
  "INTERNAL",
] as const;
export type ErrorCode = (typeof ERROR_CODES)[number];

export function isErrorCode(value: unknown): value is ErrorCode {
  return typeof value === "string" && (ERROR_CODES as readonly string[]).includes(value);
}

/** The usual gRPC → HTTP mapping (google.api / grpc-gateway). */
export const httpStatusOf: Record<ErrorCode, number> = {
  INVALID_ARGUMENT: 400,
  NOT_FOUND: 404,
  ALREADY_EXISTS: 409,
  FAILED_PRECONDITION: 412,
  ABORTED: 409,
  UNAUTHENTICATED: 401,
  PERMISSION_DENIED: 403,
  RESOURCE_EXHAUSTED: 429,
  DEADLINE_EXCEEDED: 504,
  CANCELLED: 499,
  UNAVAILABLE: 503,
  UNIMPLEMENTED: 501,
  INTERNAL: 500,
};
