import { HTTPException } from "hono/http-exception";
import { type ApiErrorBody, ErrorCode, httpStatusOf } from "../../contracts/errors.ts";

/**
 * Any thrown value as the one error shape of the API, `{code, message, details?}`, with its HTTP
 * status. Errors are told apart by their `code` (never `instanceof`); anything without a
 * canonical code is INTERNAL and its text stays in the log.
 */
export function toErrorResponse(error: unknown): { status: number; body: ApiErrorBody; internal: boolean } {
  const coded = error as { code?: unknown; message?: unknown; details?: unknown } | null;
  const code = ErrorCode.safeParse(coded?.code);
  if (code.success) {
    const body: ApiErrorBody = { code: code.data, message: String(coded?.message ?? code.data) };
    if (coded?.details && typeof coded.details === "object")
      body.details = coded.details as Record<string, unknown>;
    return { status: httpStatusOf[code.data], body, internal: false };
  }
  if (error instanceof HTTPException) {
    const byStatus = (Object.entries(httpStatusOf) as [ErrorCode, number][]).find(
      ([, s]) => s === error.status,
    );
    return {
      status: error.status,
      body: { code: byStatus?.[0] ?? "INTERNAL", message: error.message || "request failed" },
      internal: false,
    };
  }
  return { status: 500, body: { code: "INTERNAL", message: "internal error" }, internal: true };
}
