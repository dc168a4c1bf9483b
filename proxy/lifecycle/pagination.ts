import { CodedError } from "../../contracts/errors.ts";
import { DEFAULT_PAGE_SIZE, PageSize, PageToken } from "../../contracts/pagination.ts";
import type { PageQuery } from "../store/store.ts";
import { parseInput } from "./request-body.ts";

/**
 * A page token names its list and the sort key of the last item it gave (base64url JSON). It is
 * not a secret: a forged one only moves where the next page starts within the same list, whose
 * filters (namespace, caller) the server applies anyway.
 */
export function pageQuery(
  list: string,
  size: number | undefined,
  token: string | undefined,
  field: string,
  /** Where the token came from when not the body (`?continue=`: the query). */
  location?: "query",
): PageQuery {
  const limit = size ?? DEFAULT_PAGE_SIZE;
  if (token === undefined) return { limit };
  let decoded: unknown;
  try {
    decoded = JSON.parse(Buffer.from(token, "base64url").toString("utf8"));
  } catch {
    decoded = undefined;
  }
  const key = (decoded as { l?: unknown; k?: unknown } | undefined)?.k;
  if (
    (decoded as { l?: unknown } | undefined)?.l !== list ||
    !Array.isArray(key) ||
    key.length === 0 ||
    !key.every((part) => typeof part === "string")
  )
    throw new CodedError(
      "INVALID_ARGUMENT",
      `invalid ${field}: ${location ? `${field} (${location})` : field}: not a token of this list (${list}); pass the one its previous page answered, or none for the first page`,
      {
        field_violations: [
          { field, ...(location ? { location } : {}), description: "not a token of this list" },
        ],
      },
    );
  return { after: key as string[], limit };
}

/**
 * The page out of `rows` read with `limit + 1` (the extra row says a next page exists), and the
 * token of that next page.
 */
export function pageOf<T>(
  list: string,
  rows: readonly T[],
  query: PageQuery,
  keyOf: (item: T) => readonly string[],
): { items: T[]; next?: string } {
  if (rows.length <= query.limit) return { items: [...rows] };
  const items = rows.slice(0, query.limit);
  const last = items[items.length - 1] as T;
  return { items, next: Buffer.from(JSON.stringify({ l: list, k: keyOf(last) })).toString("base64url") };
}

/** A Kubernetes-style list's `?limit=&continue=` (query strings as they came). */
export function listQuery(
  list: string,
  query: { limit?: string | undefined; continue?: string | undefined },
): PageQuery {
  const size =
    query.limit === undefined
      ? undefined
      : parseInput(PageSize, query.limit, "limit", { in: "query", name: "limit" });
  const token =
    query.continue === undefined
      ? undefined
      : parseInput(PageToken, query.continue, "continue", {
          in: "query",
          name: "continue",
        });
  return pageQuery(list, size, token, "continue", "query");
}
