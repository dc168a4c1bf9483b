import type { MiddlewareHandler } from "hono";
import { type ErrorCode, httpStatusOf } from "../../contracts/errors.ts";
import { RpcMethod } from "../../contracts/rpc.ts";
import { toErrorResponse } from "./error-response.ts";
import type { Metrics } from "../observability/metrics.ts";

/**
 * Counts every answered `POST /v1/rpc/{Method}` by method and gRPC code, and times it. Mount on
 * `/v1/rpc/:method`. Unknown method names are counted as `unknown` (labels stay a bounded set).
 */
export function rpcMetrics(metrics: Metrics): MiddlewareHandler {
  return async (c, next) => {
    const started = performance.now();
    await next();
    const name = RpcMethod.safeParse(c.req.param("method"));
    metrics.recordRpc(
      name.success ? name.data : "unknown",
      codeOf(c.error, c.res.status),
      (performance.now() - started) / 1000,
    );
  };
}

function codeOf(error: Error | undefined, status: number): string {
  if (error) return toErrorResponse(error).body.code;
  if (status < 400) return "OK";
  const byStatus = (Object.entries(httpStatusOf) as [ErrorCode, number][]).find(([, s]) => s === status);
  return byStatus?.[0] ?? "UNKNOWN";
}
