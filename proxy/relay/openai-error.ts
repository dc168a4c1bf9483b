import { type ApiErrorBody, ErrorCode } from "../../contracts/errors.ts";
import type { OpenAIErrorBody } from "../../contracts/openai-chat.ts";

/**
 * Our error (`{code, message, details?}`) in OpenAI's shape (`{error: {message, type, param,
 * code}}`), which OpenAI's clients turn into their typed errors by HTTP status. `type` follows
 * the status (OpenAI's own names where it has them), `code` is our gRPC canonical code, `param`
 * the first offending field of an INVALID_ARGUMENT (as `messages.0.content`).
 */
export function openAIError(status: number, error: ApiErrorBody): OpenAIErrorBody {
  const violations = error.details?.field_violations as { field?: unknown }[] | undefined;
  const field = violations?.find((v) => typeof v.field === "string")?.field as string | undefined;
  return {
    error: {
      message: error.message,
      type: errorType(status),
      param: field ?? null,
      code: error.code,
    },
  };
}

function errorType(status: number): string {
  if (status === 401) return "authentication_error";
  if (status === 403) return "permission_error";
  if (status === 404) return "not_found_error";
  if (status === 409) return "conflict_error";
  if (status === 429) return "rate_limit_error";
  if (status >= 500) return "server_error";
  return "invalid_request_error";
}

/** Whether a JSON body is our error shape (so a route in OpenAI's shape rewrites it). */
export function isApiError(body: unknown): body is ApiErrorBody {
  const b = body as { code?: unknown; message?: unknown } | null;
  return typeof b?.message === "string" && ErrorCode.safeParse(b.code).success;
}
