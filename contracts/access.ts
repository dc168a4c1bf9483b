import { z } from "zod";
import { parseDuration } from "./duration.ts";
import { DnsLabel } from "./session-spec.ts";

/**
 * Scoped API tokens (issue 17). A token carries one or more scopes; the admin token is `admin`.
 *
 * - `admin`: everything (tokens, runners, RPCs, every namespace).
 * - `namespace:<ns>:edit`: manage AgentRuntimes, Agents, HarnessSessions and AgentRuns in `<ns>`,
 *   chat with its sessions, follow its events, call the RPCs on its Agents' containers and
 *   sessions, write their workspace files.
 * - `namespace:<ns>:view`: read them (status, workspace files, the namespace's events); no writes,
 *   no chat.
 * - `session:<ns>/<name>:chat`: send requests to that one HarnessSession, cancel them, follow its
 *   events, read its status and its workspace files, reach its declared ports; nothing else.
 * - `session:<ns>/<name>:port:<port>`: reach that one declared port of that one HarnessSession
 *   (`…/harnesssessions/{name}/ports/{port}/…`, HTTP and WebSocket; issue 40); nothing else: not
 *   another port, not its requests, status, events or files, no other route.
 *
 * The strings are a fixed interface (scripts build them): never change their grammar.
 */
const LABEL = "[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?";
const NAMESPACE_SCOPE = new RegExp(`^namespace:(${LABEL}):(edit|view)$`);
const SESSION_SCOPE = new RegExp(`^session:(${LABEL})/(${LABEL}):chat$`);
const PORT_SCOPE = new RegExp(`^session:(${LABEL})/(${LABEL}):port:([1-9][0-9]{3,4})$`);

/** The ports a port scope may name (contracts/session-ports.ts PortNumber). */
function isPortNumber(port: number): boolean {
  return Number.isInteger(port) && port >= 1024 && port <= 65535;
}

export type ParsedScope =
  | { kind: "admin" }
  | { kind: "namespace"; namespace: string; role: "edit" | "view" }
  | {
      kind: "session";
      namespace: string;
      name: string;
      role: "chat";
      /**
       * The HarnessSession's `metadata.uid` the token was issued for: the server binds a chat
       * token to the session as it is at issue time (never part of the scope string), so a
       * session deleted and re-created under the same name is not the token's.
       */
      uid?: string | undefined;
    }
  | {
      kind: "port";
      namespace: string;
      name: string;
      port: number;
      /** As a chat scope's: the session's uid at issue time (never part of the scope string). */
      uid?: string | undefined;
    };

/** What a scope string grants, or undefined when it is not one. */
export function parseScope(text: string): ParsedScope | undefined {
  if (text === "admin") return { kind: "admin" };
  const ns = NAMESPACE_SCOPE.exec(text);
  if (ns) return { kind: "namespace", namespace: ns[1] as string, role: ns[2] as "edit" | "view" };
  const session = SESSION_SCOPE.exec(text);
  if (session)
    return { kind: "session", namespace: session[1] as string, name: session[2] as string, role: "chat" };
  const port = PORT_SCOPE.exec(text);
  if (port && isPortNumber(Number(port[3])))
    return { kind: "port", namespace: port[1] as string, name: port[2] as string, port: Number(port[3]) };
  return undefined;
}

export const Scope = z
  .string()
  .max(160)
  .refine((text) => parseScope(text) !== undefined, {
    message:
      "must be admin, namespace:<ns>:edit, namespace:<ns>:view, session:<ns>/<name>:chat or session:<ns>/<name>:port:<port> (1024-65535)",
  });
export type Scope = z.infer<typeof Scope>;

/** The scope strings of each kind, as the CLI and docs write them. */
export const scopeOf = {
  admin: (): Scope => "admin",
  namespace: (namespace: string, role: "edit" | "view"): Scope => `namespace:${namespace}:${role}`,
  session: (namespace: string, name: string): Scope => `session:${namespace}/${name}:chat`,
  port: (namespace: string, name: string, port: number): Scope => `session:${namespace}/${name}:port:${port}`,
};

/** The scope string of a parsed scope (parseScope's inverse). */
export function formatScope(scope: ParsedScope): Scope {
  switch (scope.kind) {
    case "admin":
      return scopeOf.admin();
    case "namespace":
      return scopeOf.namespace(scope.namespace, scope.role);
    case "session":
      return scopeOf.session(scope.namespace, scope.name);
    case "port":
      return scopeOf.port(scope.namespace, scope.name, scope.port);
    default: {
      const unreachable: never = scope;
      return unreachable;
    }
  }
}

/** `GET /v1/whoami`: who the bearer token is and what it may do (the UI adapts to it). */
export const WhoAmI = z.object({ name: z.string(), id: z.string(), scopes: z.array(Scope) });
export type WhoAmI = z.infer<typeof WhoAmI>;

/**
 * What a route needs:
 * - `admin`: only `admin`.
 * - `namespace`: `view` is granted by the namespace's view or edit; `edit` by edit only.
 * - `session`: `view` (read status, follow events) by the namespace's view or edit or the
 *   session's chat; `chat` (send, cancel) by the namespace's edit or the session's chat; `port`
 *   (reach declared port `port`) by the namespace's edit, the session's chat or that port's own
 *   scope, and by nothing else (the namespace's view does not: a port may write).
 * `admin` grants everything. A port scope grants only its port.
 */
export type Need =
  | { kind: "admin" }
  | { kind: "namespace"; namespace: string; action: "view" | "edit" }
  | {
      kind: "session";
      namespace: string;
      name: string;
      action: "view" | "chat" | "port";
      /** `action: port`: which port. */
      port?: number | undefined;
      /** The session's `metadata.uid` now, when known: a chat token bound to another uid is refused. */
      uid?: string | undefined;
    };

export function grants(scope: ParsedScope, need: Need): boolean {
  if (scope.kind === "admin") return true;
  if (need.kind === "admin") return false;
  if (scope.kind === "namespace") {
    // Reading needs view or edit; anything else (edit, chat, a port) needs edit.
    return scope.namespace === need.namespace && (need.action === "view" || scope.role === "edit");
  }
  // A session scope grants nothing namespace-wide.
  if (need.kind !== "session") return false;
  // A port scope grants its one port and nothing else.
  if (scope.kind === "port" && (need.action !== "port" || need.port !== scope.port)) return false;
  return (
    scope.namespace === need.namespace &&
    scope.name === need.name &&
    (scope.uid === undefined || need.uid === undefined || scope.uid === need.uid)
  );
}

/** True when any of the scopes grants `need`. */
export function allows(scopes: readonly ParsedScope[], need: Need): boolean {
  return scopes.some((scope) => grants(scope, need));
}

/** The narrowest scopes any of which would grant `need`, for "missing scope" messages. */
export function scopesGranting(need: Need): Scope[] {
  switch (need.kind) {
    case "admin":
      return ["admin"];
    case "namespace":
      return need.action === "view"
        ? [scopeOf.namespace(need.namespace, "view"), scopeOf.namespace(need.namespace, "edit")]
        : [scopeOf.namespace(need.namespace, "edit")];
    case "session":
      if (need.action === "port")
        return [
          ...(need.port !== undefined ? [scopeOf.port(need.namespace, need.name, need.port)] : []),
          scopeOf.session(need.namespace, need.name),
          scopeOf.namespace(need.namespace, "edit"),
        ];
      return need.action === "view"
        ? [
            scopeOf.session(need.namespace, need.name),
            scopeOf.namespace(need.namespace, "view"),
            scopeOf.namespace(need.namespace, "edit"),
          ]
        : [scopeOf.session(need.namespace, need.name), scopeOf.namespace(need.namespace, "edit")];
    default: {
      const unreachable: never = need;
      return unreachable;
    }
  }
}

/** The namespaces whose every resource a scope set may read (undefined: all of them, admin). */
export function readableNamespaces(scopes: readonly ParsedScope[]): Set<string> | undefined {
  if (scopes.some((s) => s.kind === "admin")) return undefined;
  return new Set(scopes.flatMap((s) => (s.kind === "namespace" ? [s.namespace] : [])));
}

/** A token's name: unique on the server, a DNS label (it appears in URLs and audit lines). */
export const TokenName = DnsLabel;

/** Longest lifetime a token may be given (one year). */
export const MAX_TOKEN_TTL_MS = 366 * 24 * 3_600_000;
/** A token that names only session scopes lives this long unless told otherwise (1 h). */
export const DEFAULT_SESSION_TOKEN_TTL = "1h";

export const TokenTtl = z.string().refine(
  (text) => {
    const ms = parseDuration(text);
    return ms !== undefined && ms > 0 && ms <= MAX_TOKEN_TTL_MS;
  },
  { message: "must be a duration such as 15m, 1h or 720h (units ms, s, m, h), more than 0 and up to 8784h" },
);

/** `POST /v1/tokens`. Without `ttl` a token never expires, except a session-only token (1 h). */
export const CreateTokenRequest = z.strictObject({
  name: TokenName,
  scopes: z
    .array(Scope)
    .min(1)
    .max(32)
    .refine((list) => new Set(list).size === list.length, { message: "scopes must be unique" }),
  ttl: TokenTtl.optional(),
});
export type CreateTokenRequest = z.infer<typeof CreateTokenRequest>;

/** A token as listed: never its secret. */
export const TokenInfo = z.object({
  name: TokenName,
  /** Stable id audit lines carry (never the token). */
  id: z.string(),
  scopes: z.array(Scope),
  createdAt: z.string(),
  expiresAt: z.string().optional(),
});
export type TokenInfo = z.infer<typeof TokenInfo>;

/** `POST /v1/tokens` answers the secret this once; the server keeps only its hash. */
export const CreatedToken = TokenInfo.extend({ token: z.string() });
export type CreatedToken = z.infer<typeof CreatedToken>;

export const TokenList = z.object({ items: z.array(TokenInfo) });
export type TokenList = z.infer<typeof TokenList>;

/** Every API token starts so (tells it apart from the admin and runner tokens in a leak scan). */
export const API_TOKEN_PREFIX = "ast_";

/** An API token's shape: the prefix and 43 base64url characters (32 random bytes). */
export const ApiTokenText = z.string().regex(/^ast_[A-Za-z0-9_-]{43}$/);
