/**
 * The HTTP side of a v1alpha2 adapter (contracts/adapter.ts), shared by every runtime the project
 * ships (directly, or through runtimes/kit/adapter-entry.ts): readiness and liveness, the
 * bearer-authenticated request endpoint with bounded body and time, one result record per request
 * (kept in memory and appended to `<workspace>/results.ndjson` on the session volume), the
 * session's transcript beside it (`<workspace>/.transcript.json`: transcript.ts), cancellation
 * of one request, streaming only when the runtime declares it, and graceful shutdown on SIGTERM.
 * What answers a request is the runtime's `AgentHandler`.
 *
 * The server listens at once, also while the runtime's agent is still loading (`starting`): a
 * container's `/readyz` then says 200 as soon as its adapter can take a request, and a request
 * that arrives before the agent is up waits for it in the handler (docs/runtimes.md, "Readiness
 * while the agent loads").
 * An agent that fails to start makes the adapter refuse new requests (503 UNAVAILABLE naming why),
 * answer the ones it holds (the handler fails them) and exit 1.
 */
import { createHash, timingSafeEqual } from "node:crypto";
import { appendFileSync, mkdirSync } from "node:fs";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import {
  ADAPTER_PORT,
  AdapterRequest,
  type ResultRecord,
  type StreamEvent,
  type Usage,
} from "../../contracts/adapter.ts";
import { TranscriptFile } from "./transcript.ts";

export type ToolStreamEvent = Omit<Extract<StreamEvent, { type: "tool" }>, "type">;

/** What the agent answered one request with. */
export type AgentReply = { text: string; usage: Usage };

/**
 * Answers one request. `onDelta` is given only for a streamed request; `signal` aborts on cancel,
 * timeout or a client that went away. Throwing fails the request with the error's message (it
 * reaches the client: never put a credential in it).
 */
export type AgentHandler = (
  input: string,
  context: {
    requestId: string;
    signal: AbortSignal;
    onDelta?: (text: string) => void;
    /** Streamed requests only: a tool call started or ended (runtimes declaring `tools`). */
    onTool?: (event: ToolStreamEvent) => void;
  },
) => Promise<AgentReply>;

export type AdapterEnv = {
  port: number;
  token: string;
  streaming: boolean;
  maxBodyBytes: number;
  requestTimeoutMs: number;
  workspace: string;
};

/** The adapter settings the session workload's environment carries (infra/*-session.ts). */
export function adapterEnv(source: NodeJS.ProcessEnv = process.env): AdapterEnv {
  return {
    port: Number(source.ADAPTER_PORT ?? ADAPTER_PORT),
    token: source.ADAPTER_TOKEN ?? "",
    streaming: source.ADAPTER_STREAMING === "true",
    maxBodyBytes: Number(source.ADAPTER_MAX_BODY_BYTES ?? 256 * 1024),
    requestTimeoutMs: Number(source.ADAPTER_REQUEST_TIMEOUT_MS ?? 60_000),
    workspace: source.AGENT_WORKSPACE ?? "/workspace",
  };
}

export type AdapterServerOptions = AdapterEnv & {
  handle: AgentHandler;
  /**
   * Sees each valid request first; true when it answered `res` itself (no result is recorded).
   * The reference runtime's fault inputs use it. @default none
   */
  intercept?: (request: AdapterRequest, res: ServerResponse) => boolean;
  /** Ready beyond "not draining" (e.g. the agent process answers). @default always */
  ready?: () => boolean;
  /** After SIGTERM, once in-flight requests finished: stop the agent. @default nothing */
  shutdown?: () => Promise<void>;
  /**
   * The agent's start while it loads: the adapter answers `/readyz` meanwhile (the handler waits
   * for it). If it rejects, the adapter refuses new requests with its message (503 UNAVAILABLE),
   * lets the requests in flight end and exits 1. Its message reaches clients: no secret in it.
   * @default none (started)
   */
  starting?: Promise<unknown>;
  /** @default process.exit */
  exit?: (code: number) => void;
};

export function startAdapterServer(options: AdapterServerOptions): Server {
  const resultsFile = `${options.workspace}/results.ndjson`;
  mkdirSync(options.workspace, { recursive: true });
  const inflight = new Map<string, AbortController>();
  const results = new Map<string, ResultRecord>();
  const transcript = new TranscriptFile(options.workspace);
  const exit = options.exit ?? ((code: number) => process.exit(code));
  let draining = false;
  /** Why the agent did not start, once it did not. */
  let failed: string | undefined;
  let starting = options.starting !== undefined;

  const tokenMatches = (header: string | undefined): boolean => {
    if (!options.token) return false;
    const given = header?.startsWith("Bearer ") ? header.slice(7) : "";
    const a = createHash("sha256").update(given).digest();
    const b = createHash("sha256").update(options.token).digest();
    return timingSafeEqual(a, b);
  };

  const record = (result: ResultRecord): ResultRecord => {
    results.set(result.id, result);
    appendFileSync(resultsFile, `${JSON.stringify(result)}\n`);
    return result;
  };

  async function readBody(req: IncomingMessage): Promise<string> {
    const chunks: Buffer[] = [];
    let size = 0;
    for await (const chunk of req as AsyncIterable<Buffer>) {
      size += chunk.length;
      if (size > options.maxBodyBytes) throw Object.assign(new Error("body too large"), { status: 413 });
      chunks.push(chunk);
    }
    return Buffer.concat(chunks).toString("utf8");
  }

  async function handleRequest(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const parsed = AdapterRequest.safeParse(JSON.parse(await readBody(req)));
    if (!parsed.success)
      return send(res, 400, {
        code: "INVALID_ARGUMENT",
        message: parsed.error.issues[0]?.message ?? "invalid request",
      });
    const request = parsed.data;
    if (options.intercept?.(request, res)) return;
    if (request.stream && !options.streaming)
      return send(res, 400, { code: "INVALID_ARGUMENT", message: "this runtime does not declare streaming" });
    if (inflight.has(request.id) || results.has(request.id))
      return send(res, 409, { code: "ALREADY_EXISTS", message: `request ${request.id} exists` });
    const controller = new AbortController();
    const timer = setTimeout(
      () => controller.abort(new Error("request timed out")),
      options.requestTimeoutMs,
    );
    inflight.set(request.id, controller);
    // A client that goes away cancels the work.
    res.on("close", () => {
      if (!res.writableFinished) controller.abort(new Error("client disconnected"));
    });
    const startedAt = new Date().toISOString();
    const writeEvent = (event: StreamEvent) => res.write(`data: ${JSON.stringify(event)}\n\n`);
    /** The tools called while answering, for the transcript. */
    const tools: { call: string; name: string; failed: boolean }[] = [];
    if (request.stream)
      res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-store" });
    let result: ResultRecord;
    try {
      const reply = await options.handle(request.input, {
        requestId: request.id,
        signal: controller.signal,
        ...(request.stream
          ? {
              onDelta: (text: string) => writeEvent({ type: "delta", text }),
              onTool: (event: ToolStreamEvent) => {
                const seen = tools.find((t) => t.call === event.call_id);
                if (!seen)
                  tools.push({ call: event.call_id, name: event.name, failed: Boolean(event.is_error) });
                else if (event.phase === "end") seen.failed = Boolean(event.is_error);
                writeEvent({ type: "tool", ...event });
              },
            }
          : {}),
      });
      if (controller.signal.aborted) throw controller.signal.reason;
      result = record({
        id: request.id,
        outcome: "succeeded",
        output: reply.text,
        usage: reply.usage,
        started_at: startedAt,
        finished_at: new Date().toISOString(),
      });
    } catch (error) {
      const cancelled = controller.signal.aborted;
      result = record({
        id: request.id,
        outcome: cancelled ? "cancelled" : "failed",
        error: cancelled
          ? String((controller.signal.reason as Error | undefined)?.message ?? "cancelled")
          : (error as Error).message,
        usage: "unavailable",
        started_at: startedAt,
        finished_at: new Date().toISOString(),
      });
    } finally {
      clearTimeout(timer);
      inflight.delete(request.id);
    }
    transcript.add({
      id: result.id,
      at: result.finished_at ?? new Date().toISOString(),
      input: request.input,
      outcome: result.outcome,
      ...(result.output !== undefined ? { output: result.output } : {}),
      ...(result.error !== undefined ? { error: result.error } : {}),
      ...(tools.length ? { tools: tools.map(({ name, failed }) => ({ name, failed })) } : {}),
    });
    if (request.stream) {
      writeEvent({ type: "result", result });
      res.end();
    } else {
      send(res, result.outcome === "succeeded" ? 200 : result.outcome === "cancelled" ? 499 : 502, result);
    }
  }

  const server = createServer((req, res) => {
    const url = new URL(req.url ?? "/", "http://adapter");
    if (req.method === "GET" && url.pathname === "/healthz") return send(res, 200, { ok: true });
    if (req.method === "GET" && url.pathname === "/readyz") {
      const ready = !draining && (options.ready?.() ?? true);
      return send(res, ready ? 200 : 503, {
        ready,
        inflight: inflight.size,
        // Ready while the agent loads: requests wait for it (the runner needs no more than 200).
        ...(starting ? { agent: "starting" } : {}),
        ...(failed !== undefined ? { error: failed } : {}),
      });
    }
    if (!tokenMatches(req.headers.authorization))
      return send(res, 401, { code: "UNAUTHENTICATED", message: "adapter token required" });
    if (req.method === "POST" && url.pathname === "/v1/requests") {
      if (draining)
        return send(res, 503, { code: "UNAVAILABLE", message: failed ?? "adapter is shutting down" });
      handleRequest(req, res).catch((error: Error & { status?: number }) => {
        if (!res.headersSent)
          send(res, error.status ?? 400, {
            code: error.status === 413 ? "RESOURCE_EXHAUSTED" : "INVALID_ARGUMENT",
            message: error.message,
          });
        else res.end();
      });
      return;
    }
    const cancel = url.pathname.match(/^\/v1\/requests\/([A-Za-z0-9._-]+)\/cancel$/);
    if (req.method === "POST" && cancel?.[1]) {
      const controller = inflight.get(cancel[1]);
      if (!controller) return send(res, 404, { code: "NOT_FOUND", message: "no such request in flight" });
      controller.abort(new Error("cancelled by request"));
      return send(res, 202, { id: cancel[1], cancelling: true });
    }
    const get = url.pathname.match(/^\/v1\/requests\/([A-Za-z0-9._-]+)$/);
    if (req.method === "GET" && get?.[1]) {
      const result = results.get(get[1]);
      return result
        ? send(res, 200, result)
        : send(res, 404, { code: "NOT_FOUND", message: "no such request" });
    }
    send(res, 404, { code: "NOT_FOUND", message: "no such route" });
  });
  server.requestTimeout = options.requestTimeoutMs + 5_000;
  server.listen(options.port, "0.0.0.0");

  /** Refuse new work, let in-flight requests finish, stop the agent, exit with `code`. */
  const drain = (code: number): void => {
    if (draining) return;
    draining = true;
    server.close();
    const poll = setInterval(() => {
      if (inflight.size > 0) return;
      clearInterval(poll);
      void (options.shutdown?.() ?? Promise.resolve()).finally(() => exit(code));
    }, 50);
  };
  options.starting?.then(
    () => {
      starting = false;
    },
    (error: unknown) => {
      starting = false;
      failed = error instanceof Error ? error.message : String(error);
      process.stderr.write(
        `${JSON.stringify({ level: "error", msg: "the agent did not start", error: failed })}\n`,
      );
      drain(1);
    },
  );
  // Graceful shutdown (SIGTERM): the same drain, a clean exit.
  process.on("SIGTERM", () => drain(0));
  return server;
}

function send(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { "content-type": "application/json" });
  res.end(JSON.stringify(body));
}
