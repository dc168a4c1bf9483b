import type { MiddlewareHandler } from "hono";
import { toErrorResponse } from "./error-response.ts";
import type { Logger } from "../observability/log.ts";

/** Probes and scrapes come every few seconds: logged at debug so they do not drown the rest. */
const QUIET_PATHS = new Set(["/healthz", "/readyz", "/metrics"]);

/**
 * One structured `http request` line per request: the request id (hono's requestId middleware,
 * echoed as `x-request-id`), method, path, status, duration and, on failure, the gRPC code.
 * Mount after `requestId()`. A streamed reply (SSE) is logged when its headers are sent; its
 * duration is the time to the first byte. Query strings are left out (they may carry cursors,
 * never secrets, but are noise); bodies and headers are never logged.
 */
export function accessLog(log: Logger): MiddlewareHandler {
  return async (c, next) => {
    const started = performance.now();
    await next();
    const status = c.res.status;
    const fields: Record<string, unknown> = {
      request_id: c.get("requestId"),
      method: c.req.method,
      path: c.req.path,
      status,
      duration_ms: Math.round((performance.now() - started) * 10) / 10,
    };
    if (c.error) fields.code = toErrorResponse(c.error).body.code;
    const level = status >= 500 ? "warn" : QUIET_PATHS.has(c.req.path) ? "debug" : "info";
    log(level, "http request", fields);
  };
}
