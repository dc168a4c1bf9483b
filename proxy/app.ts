import { Hono } from "hono";
import { CodedError } from "../contracts/errors.ts";
import { requireAdminToken } from "./auth.ts";
import { toErrorResponse } from "./error-response.ts";
import type { EventBus } from "./event-bus.ts";
import { eventRoutes } from "./event-stream.ts";
import type { RpcHandlers } from "./lifecycle.ts";
import { type Logger, silentLogger } from "./log.ts";
import { resourceRoutes } from "./resource-routes.ts";
import { rpcRoutes } from "./rpc-routes.ts";
import { RUNNER_CONNECT_PATH } from "./runner-hub.ts";
import type { Store } from "./store/store.ts";

export type AppOptions = {
  store: Store;
  bus: EventBus;
  rpc: RpcHandlers;
  adminToken: string;
  runnerToken: string;
  /** Ends open event streams (server shutdown). */
  shutdown?: AbortSignal;
  /** @default 15000 */
  keepAliveMs?: number;
  log?: Logger;
};

/**
 * The HTTP API (never listens; `main.ts` does). Everything under `/v1` takes the admin bearer
 * token; the runner link is a WebSocket upgrade handled by the RunnerHub before Hono sees it.
 */
export function buildApp(options: AppOptions): Hono {
  const log = options.log ?? silentLogger;
  const app = new Hono();

  app.get("/healthz", (c) => c.json({ status: "ok" }));
  app.get("/readyz", (c) => {
    if (!options.store.isOpen) throw new CodedError("UNAVAILABLE", "the store is not open");
    return c.json({ status: "ready" });
  });
  // Reached only by a request that is not a WebSocket upgrade.
  app.get(RUNNER_CONNECT_PATH, () => {
    throw new CodedError(
      "FAILED_PRECONDITION",
      "runners connect here with a WebSocket upgrade and a runner token",
    );
  });

  app.use("/v1/*", requireAdminToken(options));
  app.route("/v1/rpc", rpcRoutes(options.rpc));
  app.route("/v1/namespaces", resourceRoutes(options.store));
  const events: Parameters<typeof eventRoutes>[0] = { store: options.store, bus: options.bus };
  if (options.shutdown) events.shutdown = options.shutdown;
  if (options.keepAliveMs !== undefined) events.keepAliveMs = options.keepAliveMs;
  app.route("/v1/events", eventRoutes(events));

  app.notFound((c) =>
    c.json({ code: "NOT_FOUND", message: `no route for ${c.req.method} ${c.req.path}` }, 404),
  );
  app.onError((error, c) => {
    const { status, body, internal } = toErrorResponse(error);
    if (internal)
      log("error", "unhandled error", { method: c.req.method, path: c.req.path, error: String(error) });
    return c.json(body, status as 400);
  });
  return app;
}
