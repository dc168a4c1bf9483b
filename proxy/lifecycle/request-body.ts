import type { Context } from "hono";
import type { z } from "zod";
import { CodedError } from "../../contracts/errors.ts";
import { describeIssue, issueField } from "../../contracts/issue-message.ts";

/**
 * Deepest nesting of objects and arrays a JSON body may have. Deeper bodies would reach
 * recursive code (merge patches, JSON.stringify in schemas) and overflow the stack.
 */
export const MAX_JSON_DEPTH = 64;

/** The request's JSON body (an empty body is `{}`), or INVALID_ARGUMENT. */
export async function readJson(c: Context): Promise<unknown> {
  return parseJsonBody(await c.req.text());
}

/** A request body's text as JSON (empty is `{}`), nested at most MAX_JSON_DEPTH, or INVALID_ARGUMENT. */
export function parseJsonBody(text: string): unknown {
  if (text.trim() === "") return {};
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    throw new CodedError("INVALID_ARGUMENT", "the request body is not valid JSON");
  }
  if (nestedDeeperThan(json, MAX_JSON_DEPTH))
    throw new CodedError(
      "INVALID_ARGUMENT",
      `the request body is nested deeper than ${MAX_JSON_DEPTH} levels`,
    );
  return json;
}

/** Whether objects/arrays nest deeper than `limit` (iterative: no recursion on client input). */
export function nestedDeeperThan(value: unknown, limit: number): boolean {
  const stack: [unknown, number][] = [[value, 0]];
  for (let top = stack.pop(); top; top = stack.pop()) {
    const [node, depth] = top;
    if (node === null || typeof node !== "object") continue;
    if (depth >= limit) return true;
    for (const child of Object.values(node)) stack.push([child, depth + 1]);
  }
  return false;
}

/**
 * Where a value came from when it is not the JSON body: a path parameter, a query parameter or a
 * header, by the name a caller wrote (`namespace`, `limit`, `Last-Event-ID`).
 */
export type InputSource = { in: "path" | "query" | "header"; name: string };

/**
 * Parse with a schema or throw INVALID_ARGUMENT naming every offending field, in the message
 * and as `details.field_violations` (google.rpc.BadRequest's shape, plus `location` when the value
 * is not from the body): a bad `?limit=` reads `limit (query)`, never `(body)`.
 */
export function parseInput<T extends z.ZodType>(
  schema: T,
  input: unknown,
  what: string,
  from?: InputSource,
): z.infer<T> {
  const result = schema.safeParse(input);
  if (result.success) return result.data;
  const violations = result.error.issues.map((issue) => {
    const description = describeIssue(issue, input);
    if (!from) return { field: issueField(issue), description };
    const field = [from.name, ...issue.path.map(String)].join(".");
    return { field, location: from.in, description };
  });
  throw new CodedError(
    "INVALID_ARGUMENT",
    `invalid ${what}: ${violations
      .map((v) => `${"location" in v ? `${v.field} (${v.location})` : v.field}: ${v.description}`)
      .join("; ")}`,
    { field_violations: violations },
  );
}

/** A manifest may leave out the name and namespace the path already says. */
export function withPathMetadata(body: unknown, namespace: string, name: string): unknown {
  if (!body || typeof body !== "object" || Array.isArray(body)) return body;
  const manifest = body as { metadata?: unknown };
  const metadata =
    manifest.metadata && typeof manifest.metadata === "object" && !Array.isArray(manifest.metadata)
      ? (manifest.metadata as Record<string, unknown>)
      : manifest.metadata === undefined
        ? {}
        : undefined;
  if (!metadata) return body;
  return { ...manifest, metadata: { namespace, name, ...metadata } };
}
