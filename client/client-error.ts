import type { ErrorCode } from "../contracts/error-codes.ts";

/**
 * An error the API answered (`{code, message, details?}`), or UNAVAILABLE when the server could
 * not be reached. Tell errors apart by `code`, never by the message.
 */
export class ClientError extends Error {
  override name = "ClientError";
  readonly code: ErrorCode;
  /** The HTTP status; undefined when no response came (network failure). */
  readonly status: number | undefined;
  readonly details: Record<string, unknown> | undefined;

  constructor(
    code: ErrorCode,
    message: string,
    options: {
      status?: number | undefined;
      details?: Record<string, unknown> | undefined;
      cause?: unknown;
    } = {},
  ) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.code = code;
    this.status = options.status;
    this.details = options.details;
  }
}
