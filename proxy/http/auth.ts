import type { MiddlewareHandler } from "hono";
import { httpStatusOf } from "../../contracts/errors.ts";
import { identifyCaller } from "../runners/bearer.ts";

/**
 * The client API takes the admin token only (RFC 6750 bearer). A runner token is recognised and
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
      { "WWW-Authenticate": 'Bearer realm="agent-sessions"' },
    );
  };
}
