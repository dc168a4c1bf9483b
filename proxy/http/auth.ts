import type { MiddlewareHandler } from "hono";
import { httpStatusOf } from "../../contracts/errors.ts";
import { identifyCaller } from "../runners/bearer.ts";
import type { ApiTokens, Principal } from "./api-tokens.ts";

declare module "hono" {
  interface ContextVariableMap {
    /** Who the request's bearer token is (set by `authenticate`, under `/v1`). */
    principal: Principal;
  }
}

const CHALLENGE = { "WWW-Authenticate": 'Bearer realm="agent-sessions"' };

/**
 * `/metrics` takes the admin token only (RFC 6750 bearer). A runner token is recognised and
 * refused with PERMISSION_DENIED: runners speak the runner protocol, never the client API.
 */
export function requireAdminToken(tokens: { adminToken: string; runnerToken: string }): MiddlewareHandler {
  return async (c, next) => {
    const caller = identifyCaller(c.req.header("authorization"), tokens);
    if (caller === "admin") return next();
    if (caller === "runner")
      return c.json(
        { code: "PERMISSION_DENIED", message: "a runner token cannot call the client API" },
        httpStatusOf.PERMISSION_DENIED as 403,
      );
    return c.json(
      {
        code: "UNAUTHENTICATED",
        message: caller === "anonymous" ? "a bearer token is required" : "the bearer token is not valid",
      },
      httpStatusOf.UNAUTHENTICATED as 401,
      CHALLENGE,
    );
  };
}

/**
 * Who is calling the client API: the admin token or an API token (RFC 6750 bearer). Unknown,
 * expired and revoked tokens are one 401 (nothing says which tokens exist); a runner token is a
 * 403: runners speak the runner protocol, never the client API. What the caller may do is
 * route-access.ts's business.
 */
export function authenticate(tokens: ApiTokens): MiddlewareHandler {
  return async (c, next) => {
    const result = await tokens.authenticate(c.req.header("authorization"));
    if (result.ok) {
      c.set("principal", result.principal);
      return next();
    }
    if (result.caller === "runner")
      return c.json(
        { code: "PERMISSION_DENIED", message: "a runner token cannot call the client API" },
        httpStatusOf.PERMISSION_DENIED as 403,
      );
    return c.json(
      {
        code: "UNAUTHENTICATED",
        message:
          result.caller === "anonymous"
            ? "a bearer token is required"
            : "the bearer token is not valid (unknown, expired or revoked)",
      },
      httpStatusOf.UNAUTHENTICATED as 401,
      CHALLENGE,
    );
  };
}
