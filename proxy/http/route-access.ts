import type { MiddlewareHandler } from "hono";
import { allows, formatScope, type Need, scopesGranting } from "../../contracts/access.ts";
import { CodedError, httpStatusOf } from "../../contracts/errors.ts";
import { HARNESS_SESSION_KIND } from "../../contracts/harness-session.ts";
import type { Principal } from "./api-tokens.ts";

/**
 * What each client route needs (contracts/access.ts), decided from the method and path alone
 * before any handler runs: a refused request changes nothing and, as the answer does not depend
 * on what exists, a 403 says nothing about another namespace's resources. A route missing here
 * needs `admin`, so a new route is closed until it is listed.
 *
 * `authenticated`: any valid token; the handler narrows what it shows (the event stream).
 * `owner`: any valid token; the handler decides by the namespace owning the container or session
 * the call names (rpc-access.ts: the RPCs and `/v1/workspaces/{container_name}/…`).
 */
type Rule = {
  method: string;
  pattern: RegExp;
  need: (groups: string[]) => Need | "authenticated" | "owner";
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
  rule("GET", "version", () => "authenticated"),
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
  // A session's OpenAI-compatible API (issue 41): a chat with the session, as `…/requests`.
  rule(
    "POST",
    `namespaces/${SEGMENT}/harnesssessions/${SEGMENT}/openai/v1/chat/completions`,
    sessionNeed("chat"),
  ),
  rule("GET", `namespaces/${SEGMENT}/harnesssessions/${SEGMENT}/openai/v1/models`, sessionNeed("chat")),
  // A session's declared port (issue 40), any method: the port's own scope, the session's chat or
  // the namespace's edit (never its view: a port may write). The handler refuses undeclared ports.
  rule("*", `namespaces/${SEGMENT}/harnesssessions/${SEGMENT}/ports/${SEGMENT}(?:/.*)?`, (g) => ({
    kind: "session",
    namespace: ns(g),
    name: name(g),
    action: "port",
    port: portOf(g[2]),
  })),
  // A short-lived token of one of its ports (a preview link): by whoever opens its ports already.
  rule("POST", `namespaces/${SEGMENT}/harnesssessions/${SEGMENT}/porttokens`, sessionNeed("chat")),
  // What a session's workload uses (issue 40): read with the namespace's view or the session's own.
  rule("GET", `namespaces/${SEGMENT}/harnesssessions/${SEGMENT}/metrics`, sessionNeed("view")),
  // Its logs (issue 42): what the runner saw of its processes, read like its metrics.
  rule("GET", `namespaces/${SEGMENT}/harnesssessions/${SEGMENT}/logs`, sessionNeed("view")),
  // SessionSnapshots (issue 38): taken, restored, exported, imported and deleted with the
  // namespace's edit (an export carries the agent's whole conversation); listed and read with view.
  rule("POST", `namespaces/${SEGMENT}/harnesssessions/[^/]+:(?:snapshot|restore)`, namespaceNeed("edit")),
  rule("GET", `namespaces/${SEGMENT}/sessionsnapshots`, namespaceNeed("view")),
  rule("GET", `namespaces/${SEGMENT}/sessionsnapshots/[^/]+`, namespaceNeed("view")),
  rule("DELETE", `namespaces/${SEGMENT}/sessionsnapshots/[^/]+`, namespaceNeed("edit")),
  rule("GET", `namespaces/${SEGMENT}/sessionsnapshots/[^/]+/archive`, namespaceNeed("edit")),
  rule("PUT", `namespaces/${SEGMENT}/sessionsnapshots/[^/]+/archive`, namespaceNeed("edit")),
  // Webhooks (issue 40): written and deleted with the namespace's edit, read (never their secret)
  // and their deliveries listed with view; a session's chat token does nothing with them.
  rule("GET", `namespaces/${SEGMENT}/webhooks`, namespaceNeed("view")),
  rule("GET", `namespaces/${SEGMENT}/webhooks/[^/]+`, namespaceNeed("view")),
  rule("GET", `namespaces/${SEGMENT}/webhooks/[^/]+/deliveries`, namespaceNeed("view")),
  rule("PUT", `namespaces/${SEGMENT}/webhooks/[^/]+`, namespaceNeed("edit")),
  rule("DELETE", `namespaces/${SEGMENT}/webhooks/[^/]+`, namespaceNeed("edit")),
  // A HarnessSession's workspace files: read with the namespace's view or the session's chat (a
  // session token reads its own workspace, issue 18), written with the namespace's edit only.
  rule(
    "GET",
    `namespaces/${SEGMENT}/harnesssessions/${SEGMENT}/workspace/files(?:/.+)?`,
    sessionNeed("view"),
  ),
  rule("GET", `namespaces/${SEGMENT}/harnesssessions/${SEGMENT}/workspace:archive`, sessionNeed("view")),
  rule("GET", `namespaces/${SEGMENT}/harnesssessions/${SEGMENT}/workspace:diff`, sessionNeed("view")),
  rule("PUT", `namespaces/${SEGMENT}/harnesssessions/${SEGMENT}/workspace/files/.+`, namespaceNeed("edit")),
  rule(
    "DELETE",
    `namespaces/${SEGMENT}/harnesssessions/${SEGMENT}/workspace/files/.+`,
    namespaceNeed("edit"),
  ),
  // The RPCs and an RPC workspace's files: decided by the owner of what they name.
  rule("POST", "rpc/[^/]+", () => "owner"),
  rule("GET", `workspaces/${SEGMENT}/workspace/files(?:/.+)?`, () => "owner"),
  rule("GET", `workspaces/${SEGMENT}/workspace:archive`, () => "owner"),
  rule("GET", `workspaces/${SEGMENT}/workspace:diff`, () => "owner"),
  rule("PUT", `workspaces/${SEGMENT}/workspace/files/.+`, () => "owner"),
  rule("DELETE", `workspaces/${SEGMENT}/workspace/files/.+`, () => "owner"),
  // Tokens and runners are admin's.
];

/** What `method path` needs; `admin` for anything not listed. */
export function needOf(method: string, path: string): Need | "authenticated" | "owner" {
  const m = method === "HEAD" ? "GET" : method;
  for (const r of ROUTE_RULES) {
    if (r.method !== m && r.method !== "*") continue;
    const match = r.pattern.exec(path);
    if (match) return r.need(match.slice(1));
  }
  return { kind: "admin" };
}

export type AuthorizeRouteOptions = {
  /** A HarnessSession's `metadata.uid` now, undefined when there is none (api-tokens.ts). */
  sessionUid?: ((namespace: string, name: string) => Promise<string | undefined>) | undefined;
};

/**
 * 403 PERMISSION_DENIED naming the scope that is missing, before the handler runs.
 *
 * A chat token is bound to its session's uid (contracts/access.ts): when only such a token grants
 * a session route, the session's uid now is looked up, and one re-created under the name since is
 * PERMISSION_DENIED too. Not NOT_FOUND: a session of that name does exist (the namespace's users
 * see it), and the token holder, who knows the name already, learns the one useful thing: this
 * token is not for it, ask for a new one. A session deleted and not re-created is the handler's
 * NOT_FOUND.
 */
export function authorizeRoute(options: AuthorizeRouteOptions = {}): MiddlewareHandler {
  return async (c, next) => {
    const need = needOf(c.req.method, c.req.path);
    const principal = c.get("principal");
    // A token of port scopes only (issue 40) reaches its ports and says who it is; no event
    // stream, no RPC, not even an empty answer.
    if ((need === "authenticated" || need === "owner") && c.req.path !== "/v1/whoami" && portsOnly(principal))
      return c.json(
        new CodedError(
          "PERMISSION_DENIED",
          `token ${principal.name} opens session ports only (${principal.scopes.map(formatScope).join(", ")}): it may not ${c.req.method} ${c.req.path}`,
        ).toBody(),
        httpStatusOf.PERMISSION_DENIED as 403,
      );
    if (need === "authenticated" || need === "owner") return next();
    if (!allows(principal.scopes, need))
      return c.json(
        permissionDenied(principal, `${c.req.method} ${c.req.path}`, need).toBody(),
        httpStatusOf.PERMISSION_DENIED as 403,
      );
    if (need.kind !== "session" || !options.sessionUid) return next();
    const wide = principal.scopes.filter((s) => s.kind !== "session" && s.kind !== "port");
    if (allows(wide, need)) return next();
    const uid = await options.sessionUid(need.namespace, need.name);
    if (uid === undefined || allows(principal.scopes, { ...need, uid })) return next();
    return c.json(
      new CodedError(
        "PERMISSION_DENIED",
        `token ${principal.name} was issued for ${HARNESS_SESSION_KIND} ${need.namespace}/${need.name} as it was then; it has been deleted and re-created under its name since: ask for a new token`,
        { required_scopes: scopesGranting(need) },
      ).toBody(),
      httpStatusOf.PERMISSION_DENIED as 403,
    );
  };
}

/** PERMISSION_DENIED: `principal` may not do `what`, naming the scopes any of which would let it. */
export function permissionDenied(principal: Principal, what: string, need: Need): CodedError {
  const wanted = [...scopesGranting(need), ...(need.kind === "admin" ? [] : ["admin"])];
  return new CodedError(
    "PERMISSION_DENIED",
    `token ${principal.name} may not ${what}: it needs scope ${wanted.join(" or ")}`,
    { required_scopes: wanted },
  );
}

function portsOnly(principal: Principal): boolean {
  return principal.scopes.length > 0 && principal.scopes.every((s) => s.kind === "port");
}

/** A port segment's number; anything else is no port (NaN: no port scope grants it). */
function portOf(segment: string | undefined): number {
  return /^[1-9][0-9]{0,4}$/.test(segment ?? "") ? Number(segment) : Number.NaN;
}

function decode(segment: string | undefined): string {
  try {
    return decodeURIComponent(segment ?? "");
  } catch {
    return segment ?? "";
  }
}
