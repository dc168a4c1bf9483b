import { Hono } from "hono";
import { requireAdminToken } from "./auth.ts";
import type { Metrics } from "../observability/metrics.ts";

export type MetricsRouteOptions = {
  metrics: Metrics;
  adminToken: string;
  runnerToken: string;
  /** Serve without a token (a scraper on a trusted network). @default false */
  public?: boolean;
};

/**
 * `GET /metrics`: the Prometheus text exposition. It takes the admin token (Prometheus sends
 * it with `authorization.credentials_file`) unless the server runs with
 * `AGENT_SESSIONS_METRICS_PUBLIC=true`: the metrics name no sessions, but their counts and
 * timings are still the operator's business.
 */
export function metricsRoute(options: MetricsRouteOptions): Hono {
  const app = new Hono();
  if (!options.public) app.use("*", requireAdminToken(options));
  return app.get("/", async (c) =>
    c.body(await options.metrics.render(), 200, { "content-type": options.metrics.contentType }),
  );
}
