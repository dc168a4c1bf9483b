import { z } from "zod";
import { ERROR_CODES } from "./error-codes.ts";
import { describeIssue, issueField } from "./issue-message.ts";

export { httpStatusOf } from "./error-codes.ts";

/** gRPC canonical codes used across the API, the runner link and the CLI (contracts/error-codes.ts). */
export const ErrorCode = z.enum(ERROR_CODES);
export type ErrorCode = z.infer<typeof ErrorCode>;

/** The one JSON shape every error takes on the wire. */
export const ApiErrorBody = z.object({
  code: ErrorCode,
  message: z.string(),
  details: z.record(z.string(), z.unknown()).optional(),
});
export type ApiErrorBody = z.infer<typeof ApiErrorBody>;

/**
 * An error that crosses a boundary. Across processes tell errors apart by `code`, never by
 * `instanceof`.
 */
export class CodedError extends Error {
  override name = "CodedError";
  readonly code: ErrorCode;
  readonly details: Record<string, unknown> | undefined;
  constructor(code: ErrorCode, message: string, details?: Record<string, unknown>) {
    super(message);
    this.code = code;
    this.details = details;
  }
  toBody(): ApiErrorBody {
    return this.details
      ? { code: this.code, message: this.message, details: this.details }
      : { code: this.code, message: this.message };
  }
}

/** Render a zod failure as one readable line: `spec.image: must be pinned by digest; …`. */
export function describeZodError(error: z.ZodError, input?: unknown): string {
  return error.issues.map((issue) => `${issueField(issue)}: ${describeIssue(issue, input)}`).join("; ");
}

/** Parse with a schema or throw INVALID_ARGUMENT naming what is wrong. */
export function parseOrThrow<T extends z.ZodType>(schema: T, input: unknown, what: string): z.infer<T> {
  const result = schema.safeParse(input);
  if (!result.success)
    throw new CodedError("INVALID_ARGUMENT", `invalid ${what}: ${describeZodError(result.error, input)}`);
  return result.data;
}
