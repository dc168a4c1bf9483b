/**
 * MCP through the gateway (issue 39): a session reaches its Agent's MCP servers only at
 * `<gateway>/mcp/<server>`, with its own gateway token (never a server's credential). The gateway
 * forwards the Streamable HTTP transport (MCP specification 2025-06-18, "Transports": POST of one
 * JSON-RPC message, answered with JSON or an SSE stream; GET for the server's own stream; DELETE
 * to end the transport's session) to the server's URL with the server's credential headers put in,
 * keeps out of a `tools/list` answer every tool the session may not call, answers a `tools/call`
 * of such a tool itself with a JSON-RPC error before anything reaches the server, bounds each
 * call's time (the MCPServer's `timeout`) and size, and reports every tool call (its outcome and
 * duration) to the runner, which sends it up the link (an audit record and a `tool` frame).
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Dispatcher, Pool } from "undici";
import { type McpCallOutcome, type McpServerGrant, toolAllowed } from "../../contracts/mcp.ts";
import { presentedTokens } from "./headers.ts";
import {
  eventData,
  INVALID_PARAMS,
  INVALID_REQUEST,
  jsonRpcError,
  readAnswer,
  readMcpRequest,
  SseEvents,
  toolRefusal,
  withEventData,
} from "./mcp-messages.ts";
import type { GatewayRoute, GatewayRoutes } from "./routes.ts";
import { drained, OriginPools, readBody } from "./upstream.ts";

/** The gateway's path of an MCP server: `/mcp/<name>`. */
export const MCP_PATH_PREFIX = "/mcp/";
/** A request to an MCP server past this is refused (413). */
export const MCP_REQUEST_MAX_BYTES = 4 * 1024 * 1024;
/** An answer to one request past this is cut (the call ends as an error). */
export const MCP_ANSWER_MAX_BYTES = 8 * 1024 * 1024;

export type McpToolCallReport = {
  server: string;
  tool: string;
  outcome: McpCallOutcome;
  duration_ms: number;
  message?: string;
};

/** Told of every tool call, once it ended; must not throw. */
export type McpEvents = { onToolCall(route: GatewayRoute, call: McpToolCallReport): void };

/** The request headers of the transport a client's call carries on (never its Authorization). */
const FORWARDED = ["accept", "content-type", "mcp-session-id", "mcp-protocol-version", "last-event-id"];
/** The answer's headers the client gets back. */
const RETURNED = ["content-type", "mcp-session-id", "mcp-protocol-version", "cache-control"];

export class McpForwarder {
  readonly #routes: GatewayRoutes;
  readonly #events: McpEvents;
  readonly #pools = new OriginPools();

  constructor(routes: GatewayRoutes, events: McpEvents) {
    this.#routes = routes;
    this.#events = events;
  }

  async close(): Promise<void> {
    await this.#pools.close();
  }

  /** Answers a request whose path starts with `/mcp/`. */
  async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const started = performance.now();
    const asked = new URL(req.url ?? "/", "http://gateway.invalid");
    const serverName = asked.pathname.slice(MCP_PATH_PREFIX.length).replace(/\/+$/, "");
    let found: ReturnType<GatewayRoutes["find"]>;
    for (const token of presentedTokens(req.headers)) {
      found = this.#routes.find(token);
      if (found) break;
    }
    if (!found)
      return httpError(
        res,
        401,
        "No or unknown gateway token: send the session's MCP_GATEWAY_TOKEN as `Authorization: Bearer …`.",
      );
    const route = found.route;
    const server = route.mcp?.find((s) => s.name === serverName);
    if (!server)
      return httpError(
        res,
        404,
        `MCP server "${serverName}" is not one of this session's (it has ${route.mcp?.map((s) => s.name).join(", ") || "none"}).`,
      );
    const method = req.method ?? "GET";
    if (method !== "POST" && method !== "GET" && method !== "DELETE")
      return httpError(res, 405, `The MCP gateway takes POST, GET and DELETE, not ${method}.`);

    let body: Buffer | undefined;
    let request: { id: string | number; method: string; tool?: string } | undefined;
    if (method === "POST") {
      if (Number(req.headers["content-length"]) > MCP_REQUEST_MAX_BYTES) return tooLarge(res);
      const read = await readBody(req, MCP_REQUEST_MAX_BYTES);
      if (read === "too large") return tooLarge(res);
      body = read;
      const parsed = readMcpRequest(body);
      if (parsed.kind === "batch")
        return rpcError(
          res,
          400,
          undefined,
          INVALID_REQUEST,
          "JSON-RPC batches are not forwarded by the MCP gateway (MCP 2025-06-18 has none): send one message a request.",
        );
      if (parsed.kind === "invalid")
        return rpcError(res, 400, undefined, INVALID_REQUEST, `Invalid MCP request: ${parsed.message}.`);
      if (
        parsed.tool !== undefined &&
        !toolAllowed({ allow: server.allow, deny: server.deny }, parsed.tool)
      ) {
        const message = toolRefusal(server.name, parsed.tool);
        this.#events.onToolCall(route, {
          server: server.name,
          tool: parsed.tool,
          outcome: "refused",
          duration_ms: performance.now() - started,
          message,
        });
        return rpcError(res, 200, parsed.id, INVALID_PARAMS, message);
      }
      if (parsed.id !== undefined && parsed.method !== undefined)
        request = {
          id: parsed.id,
          method: parsed.method,
          ...(parsed.tool !== undefined ? { tool: parsed.tool } : {}),
        };
    }
    await this.#forward({ route, server, method, body, request, started }, req, res);
  }

  async #forward(
    call: {
      route: GatewayRoute;
      server: McpServerGrant;
      method: string;
      body: Buffer | undefined;
      request: { id: string | number; method: string; tool?: string } | undefined;
      started: number;
    },
    req: IncomingMessage,
    res: ServerResponse,
  ): Promise<void> {
    const { route, server, request } = call;
    const upstream = new URL(server.url);
    let reported = false;
    const report = (outcome: McpCallOutcome, message?: string) => {
      if (reported || request?.tool === undefined) return;
      reported = true;
      this.#events.onToolCall(route, {
        server: server.name,
        tool: request.tool,
        outcome,
        duration_ms: performance.now() - call.started,
        ...(message !== undefined ? { message } : {}),
      });
    };
    const headers: Record<string, string> = {};
    for (const name of FORWARDED) {
      const value = req.headers[name];
      if (typeof value === "string") headers[name] = value;
    }
    // The server's credentials, put in here: the session never held them.
    for (const [name, value] of Object.entries(server.headers)) headers[name.toLowerCase()] = value;
    headers["accept-encoding"] = "identity";

    const controller = new AbortController();
    let timedOut = false;
    // A POST is one call, bounded by the server's timeout; a GET is the server's own stream, open as long as the client wants it.
    const timer =
      call.method === "POST"
        ? setTimeout(() => {
            timedOut = true;
            controller.abort(new Error("the MCP server's timeout passed"));
          }, server.timeout_ms)
        : undefined;
    res.on("close", () => {
      if (!res.writableFinished) controller.abort(new Error("the client went away"));
    });
    try {
      let reply: Awaited<ReturnType<Pool["request"]>>;
      try {
        reply = await this.#pools.get(upstream.origin).request({
          path: upstream.pathname + upstream.search,
          method: call.method as Dispatcher.HttpMethod,
          headers,
          body: call.body && call.body.length > 0 ? call.body : undefined,
          signal: controller.signal,
          headersTimeout: server.timeout_ms,
          bodyTimeout: call.method === "POST" ? server.timeout_ms : 0,
        });
      } catch (error) {
        if (timedOut) {
          const message = `MCP server "${server.name}" did not answer within ${server.timeout_ms / 1000} s`;
          report("timeout", message);
          return rpcError(res, 504, request?.id, INVALID_REQUEST, message);
        }
        if (controller.signal.aborted) return void res.destroy();
        const code = (error as { code?: unknown }).code;
        const message = `The MCP gateway could not reach MCP server "${server.name}" at ${upstream.origin}${typeof code === "string" ? ` (${code})` : ""}.`;
        report("unreachable", message);
        return rpcError(res, 502, request?.id, INVALID_REQUEST, message);
      }
      const out: Record<string, string> = {};
      for (const name of RETURNED) {
        const value = reply.headers[name];
        if (typeof value === "string") out[name] = value;
      }
      const contentType = out["content-type"] ?? "";
      const watched =
        request !== undefined && (request.method === "tools/list" || request.method === "tools/call");
      let bytes = 0;
      const tools = { allow: server.allow, deny: server.deny };
      if (contentType.includes("text/event-stream")) {
        res.writeHead(reply.statusCode, out);
        res.flushHeaders();
        const events = new SseEvents(MCP_ANSWER_MAX_BYTES);
        const decoder = new TextDecoder();
        for await (const piece of reply.body as AsyncIterable<Buffer>) {
          bytes += piece.length;
          if (call.method === "POST" && bytes > MCP_ANSWER_MAX_BYTES) throw new Error("answer too large");
          for (const event of events.push(decoder.decode(piece, { stream: true }))) {
            let sent = event;
            const data = watched ? eventData(event) : undefined;
            if (data !== undefined && request) {
              const reading = readAnswer(data, request, tools);
              if (reading.rewritten !== undefined) sent = withEventData(event, reading.rewritten);
              if (reading.outcome) report(reading.outcome.outcome, reading.outcome.message);
            }
            if (!res.write(sent)) await drained(res);
          }
        }
        const rest = events.end();
        if (rest.length > 0) res.write(rest);
        res.end();
        report("error", "the MCP server's stream ended without the call's answer");
        return;
      }
      const pieces: Buffer[] = [];
      for await (const piece of reply.body as AsyncIterable<Buffer>) {
        bytes += piece.length;
        if (bytes > MCP_ANSWER_MAX_BYTES) throw new Error("answer too large");
        pieces.push(piece);
      }
      let answer = Buffer.concat(pieces);
      if (watched && request && contentType.includes("application/json")) {
        const reading = readAnswer(answer.toString("utf8"), request, tools);
        if (reading.rewritten !== undefined) answer = Buffer.from(reading.rewritten);
        if (reading.outcome) report(reading.outcome.outcome, reading.outcome.message);
      }
      report("error", `MCP server "${server.name}" answered HTTP ${reply.statusCode} without a result`);
      res.writeHead(reply.statusCode, { ...out, "content-length": String(answer.length) });
      res.end(answer);
    } catch {
      // Cut off: the timeout, the client gone, an answer past the bound, the server's stream broken.
      const message = timedOut
        ? `MCP server "${server.name}" did not answer within ${server.timeout_ms / 1000} s`
        : `the answer of MCP server "${server.name}" was cut off (at most ${MCP_ANSWER_MAX_BYTES / 1024 / 1024} MiB, or the stream broke)`;
      report(timedOut ? "timeout" : "error", message);
      if (!res.headersSent) return rpcError(res, timedOut ? 504 : 502, request?.id, INVALID_REQUEST, message);
      res.destroy();
    } finally {
      if (timer) clearTimeout(timer);
    }
  }
}

function tooLarge(res: ServerResponse): void {
  res.shouldKeepAlive = false;
  rpcError(
    res,
    413,
    undefined,
    INVALID_REQUEST,
    `A request to an MCP server through the gateway may carry at most ${MCP_REQUEST_MAX_BYTES / 1024 / 1024} MiB.`,
  );
}

function rpcError(
  res: ServerResponse,
  status: number,
  id: string | number | undefined,
  code: number,
  message: string,
): void {
  const body = jsonRpcError(id, code, message);
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(body) });
  res.end(body);
}

function httpError(res: ServerResponse, status: number, message: string): void {
  rpcError(res, status, undefined, INVALID_REQUEST, message);
}
