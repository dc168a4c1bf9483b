import type { MiddlewareHandler } from "hono";
import { allows, type Need, scopesGranting } from "../../contracts/access.ts";
import { httpStatusOf } from "../../contracts/errors.ts";

/**
 * What each client route needs (contracts/access.ts), decided from the method and path alone
 * before any handler runs: a refused request changes nothing and, as the answer does not depend
 * on what exists, a 403 says nothing about another namespace's resources. A route missing here
 * needs `admin`, so a new route is closed until it is listed.
 *
 * `authenticated`: any valid token; the handler narrows what it shows (the event stream).
 */
type Rule = {
  method: string;
  pattern: RegExp;
  need: (groups: string[]) => Need | "authenticated";
};

const SEGMENT = "([^/]+)";
const ns = (g: string[]) => decode(g[0]);
const name = (g: string[]) => decode(g[1]);
const namespaceNeed =
  (action: "view" | "edit") =>
  (g: string[]): Need => ({ kind: "namespace", namespace: ns(g), action });
const sessionNeed =
  (action: "view" | "chat") =>
  (g: string[]): Need => ({ kind: "session", namespace: ns(g), name: name(g), action });

const RESOURCE = "(?:agentruntimes|agents)";
const rule = (method: string, path: string, need: Rule["need"]): Rule => ({
  method,
  pattern: new RegExp(`^/v1/${path}$`),
  need,
});

export const ROUTE_RULES: readonly Rule[] = [
  rule("GET", "events", () => "authenticated"),
  rule("GET", "whoami", () => "authenticated"),
  rule("GET", `namespaces/${SEGMENT}/${RESOURCE}`, namespaceNeed("view")),
  rule("GET", `namespaces/${SEGMENT}/${RESOURCE}/${SEGMENT}`, namespaceNeed("view")),
  rule("PUT", `namespaces/${SEGMENT}/${RESOURCE}/${SEGMENT}`, namespaceNeed("edit")),
  rule("DELETE", `namespaces/${SEGMENT}/${RESOURCE}/${SEGMENT}`, namespaceNeed("edit")),
  rule("GET", `namespaces/${SEGMENT}/harnesssessions`, namespaceNeed("view")),
  rule("GET", `namespaces/${SEGMENT}/harnesssessions/${SEGMENT}`, sessionNeed("view")),
  rule("PUT", `namespaces/${SEGMENT}/harnesssessions/${SEGMENT}`, namespaceNeed("edit")),
  rule("PATCH", `namespaces/${SEGMENT}/harnesssessions/${SEGMENT}`, namespaceNeed("edit")),
  rule("DELETE", `namespaces/${SEGMENT}/harnesssessions/${SEGMENT}`, namespaceNeed("edit")),
  rule("POST", `namespaces/${SEGMENT}/harnesssessions/${SEGMENT}/requests`, sessionNeed("chat")),
  rule("POST", `namespaces/${SEGMENT}/harnesssessions/${SEGMENT}/requests/[^/]+/cancel`, sessionNeed("chat")),
  rule("POST", `namespaces/${SEGMENT}/agentruns`, namespaceNeed("edit")),
  // A HarnessSession's workspace files: read with the namespace's view, written with its edit (a
  // chat token reads none: the workspace is more than the chat).
  rule(
    "GET",
    `namespaces/${SEGMENT}/harnesssessions/${SEGMENT}/workspace/files(?:/.+)?`,
    namespaceNeed("view"),
  ),
  rule("GET", `namespaces/${SEGMENT}/harnesssessions/${SEGMENT}/workspace:archive`, namespaceNeed("view")),
  rule("GET", `namespaces/${SEGMENT}/harnesssessions/${SEGMENT}/workspace:diff`, namespaceNeed("view")),
  rule("PUT", `namespaces/${SEGMENT}/harnesssessions/${SEGMENT}/workspace/files/.+`, namespaceNeed("edit")),
  rule(
    "DELETE",
    `namespaces/${SEGMENT}/harnesssessions/${SEGMENT}/workspace/files/.+`,
    namespaceNeed("edit"),
  ),
  // Tokens, runners, the RPCs and /v1/workspaces (their container_name/session_id are global) are admin's.
];

/** What `method path` needs; `admin` for anything not listed. */
export function needOf(method: string, path: string): Need | "authenticated" {
  const m = method === "HEAD" ? "GET" : method;
  for (const r of ROUTE_RULES) {
    if (r.method !== m) continue;
    const match = r.pattern.exec(path);
    if (match) return r.need(match.slice(1));
  }
  return { kind: "admin" };
}

/** 403 PERMISSION_DENIED naming the scope that is missing, before the handler runs. */
export function authorizeRoute(): MiddlewareHandler {
  return async (c, next) => {
    const need = needOf(c.req.method, c.req.path);
    const principal = c.get("principal");
    if (need === "authenticated" || allows(principal.scopes, need)) return next();
    const wanted = [...scopesGranting(need), ...(need.kind === "admin" ? [] : ["admin"])];
    return c.json(
      {
        code: "PERMISSION_DENIED",
        message: `token ${principal.name} may not ${c.req.method} ${c.req.path}: it needs scope ${wanted.join(" or ")}`,
        details: { required_scopes: wanted },
      },
      httpStatusOf.PERMISSION_DENIED as 403,
    );
  };
}

function decode(segment: string | undefined): string {
  try {
    return decodeURIComponent(segment ?? "");
  } catch {
    return segment ?? "";
  }
}
