/**
 * The model gateway (issue 35): an HTTP server the runner serves outside every session. A session
 * holds gateway tokens in place of its Agent's credential values; the gateway finds the token
 * (`Authorization: Bearer`, `x-api-key` or `api-key`), checks the call against the Agent (its
 * model endpoint's path, its allowed model names, its budgets), puts the real value in, forwards
 * to the Agent's endpoint (streamed replies chunk by chunk, a client going away cancels the
 * upstream call, the provider asked for its usage chunk) and reports what the provider said the
 * call used. Refusals are OpenAI-style error bodies (`{error: {message, type, code}}`), so every
 * harness shows them as its model's own errors. Neither tokens nor values are ever logged or echoed.
 */
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import type { Dispatcher, Pool } from "undici";
import type { Usage } from "../../contracts/adapter.ts";
import type { GatewayGrant, GatewayRefusal } from "../../contracts/runner-protocol.ts";
import { AgentBudgets } from "./budgets.ts";
import { checkCall } from "./call-body.ts";
import { clientHeaders, presentedTokens, upstreamHeaders } from "./headers.ts";
import { JsonReplyWatcher, type ReplyWatcher, SseReplyWatcher } from "./provider-usage.ts";
import { MCP_PATH_PREFIX, McpForwarder, type McpEvents } from "./mcp-forwarder.ts";
import type { GatewayRoute, GatewayRoutes } from "./routes.ts";
import { drained, OriginPools, readBody } from "./upstream.ts";

/**
 * What the gateway tells its runner. Called synchronously on the call's path: a callback must not
 * throw (a throw ends that call's reply: a 500 before its headers, cut after them).
 */
export type GatewayEvents = {
  /** Once per forwarded model call (a POST), before the client's response ends. */
  onUsage(route: GatewayRoute, report: { model: string; usage: Usage }): void;
  onRefused(route: GatewayRoute, refusal: { reason: GatewayRefusal["reason"]; message: string }): void;
} & Partial<McpEvents>;

export type Gateway = {
  host: string;
  port: number;
  /** The gateway's URL for a session whose Agent's endpoint is `upstream`: the same path, here. */
  baseUrlFor(upstream: string): string;
  /** The gateway's URL of an MCP server of a session (mcp-forwarder.ts): `/mcp/<name>`. */
  mcpUrlFor(server: string): string;
  close(): Promise<void>;
};

/** A request body past this is refused (413): chat histories are large, not this large. */
export const GATEWAY_BODY_MAX_BYTES = 16 * 1024 * 1024;
/** How long the provider may take to its first byte, and between two pieces of its reply. */
const UPSTREAM_TIMEOUT_MS = 10 * 60 * 1000;
/** A call past every check: where it goes and what it carries (call-body.ts). */
type AdmittedCall = {
  route: GatewayRoute;
  grant: GatewayGrant;
  upstream: URL;
  /** Under the upstream's path, with the query. */
  path: string;
  body: Buffer;
  model: string | undefined;
  stripUsage: boolean;
};

/** Starts the gateway on `host:port` (port 0: any free port). */
export async function startGateway(options: {
  host: string;
  port: number;
  routes: GatewayRoutes;
  events: GatewayEvents;
  /** Where the Agents' day's token counts are kept across restarts (budgets.ts); absent: memory only. */
  budgetsFile?: string;
}): Promise<Gateway> {
  const budgets = new AgentBudgets({ file: options.budgetsFile });
  const forwarder = new Forwarder(options.routes, options.events, budgets);
  const mcp = new McpForwarder(options.routes, {
    onToolCall: (route, call) => options.events.onToolCall?.(route, call),
  });
  const server = createServer((req, res) => {
    const handled = (req.url ?? "").startsWith(MCP_PATH_PREFIX)
      ? mcp.handle(req, res)
      : forwarder.handle(req, res);
    handled.catch(() => {
      // The client went away, or a bug of ours (or a throwing callback): a 500 or a cut reply, never a secret.
      if (res.destroyed) return;
      if (!res.headersSent) sendError(res, 500, "api_error", "gateway_error", "The model gateway failed.");
      else res.destroy();
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(options.port, options.host, () => {
      server.off("error", reject);
      resolve();
    });
  });
  const port = (server.address() as AddressInfo).port;
  const hostInUrl = options.host.includes(":") ? `[${options.host}]` : options.host;
  return {
    host: options.host,
    port,
    baseUrlFor: (upstream) => `http://${hostInUrl}:${port}${upstreamPath(new URL(upstream))}`,
    mcpUrlFor: (name) => `http://${hostInUrl}:${port}${MCP_PATH_PREFIX}${name}`,
    close: async () => {
      // The day's counts reach the file now, whatever else the close waits for.
      budgets.flush();
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
      await forwarder.close();
      await mcp.close();
    },
  };
}

/** The upstream's path without a trailing slash ("" for the origin's root). */
function upstreamPath(upstream: URL): string {
  return upstream.pathname.replace(/\/+$/, "");
}

class Forwarder {
  readonly #routes: GatewayRoutes;
  readonly #events: GatewayEvents;
  readonly #budgets: AgentBudgets;
  readonly #pools = new OriginPools();

  constructor(routes: GatewayRoutes, events: GatewayEvents, budgets: AgentBudgets) {
    this.#routes = routes;
    this.#events = events;
    this.#budgets = budgets;
  }

  async close(): Promise<void> {
    await this.#pools.close();
  }

  async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const call = await this.#admit(req, res);
    if (call) await this.#forward(call, req, res);
  }

  /**
   * The checks, in order: the token, the Agent's model endpoint, the path under it, the body's
   * size, the model named, the budgets. A refused call is answered here (undefined then).
   */
  async #admit(req: IncomingMessage, res: ServerResponse): Promise<AdmittedCall | undefined> {
    const tokens = presentedTokens(req.headers);
    let found: ReturnType<GatewayRoutes["find"]>;
    for (const token of tokens) {
      found = this.#routes.find(token);
      if (found) break;
    }
    if (!found)
      return sendError(
        res,
        401,
        "invalid_request_error",
        "invalid_api_key",
        tokens.length === 0
          ? "No gateway token: send the session's credential as `Authorization: Bearer …`, `x-api-key` or `api-key`."
          : "The model gateway does not know this token (a session's token stops working once its session stops).",
      );
    const { route } = found;
    const grant = route.grant;
    if (!grant)
      return sendError(
        res,
        403,
        "permission_error",
        "no_model",
        `The Agent of ${route.key} has no model (its spec.model is empty): the gateway has nowhere to send the call.`,
      );
    const upstream = new URL(grant.upstream);
    const base = upstreamPath(upstream);
    // Dot segments resolved first (`..`, `%2e%2e`), so no path steps out of the endpoint's.
    const asked = new URL(req.url ?? "/", "http://gateway.invalid");
    if (asked.pathname !== base && !asked.pathname.startsWith(`${base}/`))
      return sendError(
        res,
        404,
        "invalid_request_error",
        "not_found",
        `The gateway forwards only to the Agent's model endpoint, under ${base || "/"}; ${asked.pathname} is not there.`,
      );
    if (Number(req.headers["content-length"]) > GATEWAY_BODY_MAX_BYTES) return tooLarge(res);
    const body = await readBody(req, GATEWAY_BODY_MAX_BYTES);
    if (body === "too large") return tooLarge(res);
    const checked = checkCall(body, grant, asked.pathname);
    if (!checked.ok) {
      if (checked.code === "model_not_allowed")
        this.#events.onRefused(route, { reason: "ModelNotAllowed", message: checked.message });
      const type = checked.status === 403 ? "permission_error" : "invalid_request_error";
      return sendError(res, checked.status, type, checked.code, checked.message);
    }
    const verdict = this.#budgets.admit(grant.agent, grant.limits, Date.now());
    if (!verdict.ok) {
      this.#events.onRefused(route, { reason: verdict.reason, message: verdict.message });
      return sendError(
        res,
        429,
        "rate_limit_exceeded",
        verdict.reason === "TokenBudgetExceeded" ? "token_budget_exceeded" : "request_rate_exceeded",
        verdict.message,
        { "retry-after": String(verdict.retryAfterSeconds) },
      );
    }
    return { route, grant, upstream, path: asked.pathname + asked.search, ...checked };
  }

  /** Sends the call on and its reply back, piece by piece; reports its usage before the reply ends. */
  async #forward(call: AdmittedCall, req: IncomingMessage, res: ServerResponse): Promise<void> {
    const { route, grant, upstream } = call;
    let reported = false;
    const report = (reading: { usage: Usage; model: string | undefined }) => {
      if (reported) return;
      reported = true;
      if (reading.usage !== "unavailable")
        this.#budgets.record(
          grant.agent,
          reading.usage.input_tokens + reading.usage.output_tokens,
          Date.now(),
        );
      // A model call is a POST (a completion, a response, an embedding); a GET (the model list a
      // harness reads at start) is forwarded but uses no tokens, and is no call to count.
      if (req.method !== "POST") return;
      const model = (reading.model ?? call.model ?? "unknown").slice(0, 256);
      this.#events.onUsage(route, { model, usage: reading.usage });
    };

    const controller = new AbortController();
    res.on("close", () => {
      if (!res.writableFinished) controller.abort(new Error("the client went away"));
    });
    let reply: Awaited<ReturnType<Pool["request"]>>;
    try {
      reply = await this.#pools.get(upstream.origin).request({
        path: call.path,
        method: (req.method ?? "GET") as Dispatcher.HttpMethod,
        headers: upstreamHeaders(req.headers, route),
        body: call.body.length > 0 ? call.body : undefined,
        signal: controller.signal,
        headersTimeout: UPSTREAM_TIMEOUT_MS,
        bodyTimeout: UPSTREAM_TIMEOUT_MS,
      });
    } catch (error) {
      report({ usage: "unavailable", model: undefined });
      if (controller.signal.aborted) return void res.destroy();
      // The origin only (never userinfo) and the error's code (never its text, which may quote headers).
      const code = (error as { code?: unknown }).code;
      return void sendError(
        res,
        502,
        "api_error",
        "upstream_unreachable",
        `The model gateway could not reach Agent ${grant.agent}'s model endpoint ${upstream.origin}${upstreamPath(upstream)}` +
          (typeof code === "string" ? ` (${code}).` : "."),
      );
    }

    const streamed = String(reply.headers["content-type"] ?? "").includes("text/event-stream");
    const watcher: ReplyWatcher = streamed
      ? new SseReplyWatcher({ strip: call.stripUsage })
      : new JsonReplyWatcher();
    const headers = clientHeaders(reply.headers);
    if (streamed && call.stripUsage) delete headers["content-length"];
    res.writeHead(reply.statusCode, headers);
    try {
      for await (const piece of reply.body as AsyncIterable<Buffer>) {
        const out = watcher.push(piece);
        if (out.length > 0 && !res.write(out)) await drained(res);
      }
      const rest = watcher.end();
      if (rest.length > 0) res.write(rest);
      report({ usage: watcher.usage ?? "unavailable", model: watcher.model });
      res.end();
    } catch {
      // Cut off (the client went away, or the provider's reply broke): what was seen is reported.
      watcher.end();
      report({ usage: watcher.usage ?? "unavailable", model: watcher.model });
      res.destroy();
    }
  }
}

function tooLarge(res: ServerResponse): undefined {
  res.shouldKeepAlive = false; // the rest of the body is not read
  return sendError(
    res,
    413,
    "invalid_request_error",
    "request_too_large",
    `A call through the model gateway may carry at most ${GATEWAY_BODY_MAX_BYTES / 1024 / 1024} MiB.`,
  );
}

/** An OpenAI-style error (what every harness's model client reads). Never names a token or a value. */
function sendError(
  res: ServerResponse,
  status: number,
  type: string,
  code: string,
  message: string,
  headers: Record<string, string> = {},
): undefined {
  const body = JSON.stringify({ error: { message, type, code } });
  res.writeHead(status, {
    "content-type": "application/json",
    "content-length": Buffer.byteLength(body),
    ...headers,
  });
  res.end(body);
  return undefined;
}
