import type { Context } from "hono";
import type { z } from "zod";
import { CodedError } from "../contracts/errors.ts";

/** The request's JSON body (an empty body is `{}`), or INVALID_ARGUMENT. */
export async function readJson(c: Context): Promise<unknown> {
  const text = await c.req.text();
  if (text.trim() === "") return {};
  try {
    return JSON.parse(text);
  } catch {
    throw new CodedError("INVALID_ARGUMENT", "the request body is not valid JSON");
  }
}

/**
 * Parse with a schema or throw INVALID_ARGUMENT naming every offending field, in the message
 * and as `details.field_violations` (google.rpc.BadRequest's shape).
 */
export function parseInput<T extends z.ZodType>(schema: T, input: unknown, what: string): z.infer<T> {
  const result = schema.safeParse(input);
  if (result.success) return result.data;
  const violations = result.error.issues.map((issue) => {
    const keys = issue.code === "unrecognized_keys" ? issue.keys : [];
    const path = [...issue.path, ...(keys.length === 1 ? keys : [])].map(String).join(".");
    return { field: path || "(body)", description: issue.message };
  });
  throw new CodedError(
    "INVALID_ARGUMENT",
    `invalid ${what}: ${violations.map((v) => `${v.field}: ${v.description}`).join("; ")}`,
    { field_violations: violations },
  );
}
