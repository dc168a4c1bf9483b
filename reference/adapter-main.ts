/**
 * The reference v1alpha2 adapter (contracts/adapter.ts). Runs as the session container's main
 * process and fronts an agent that talks to an OpenAI-compatible model endpoint given by the
 * Agent's allowed credential (MODEL_BASE_URL + MODEL_API_KEY). Conversation state lives on the
 * session volume, so a session stopped and resumed remembers what it was told.
 *
 * The reference runtime is the tests' runtime: an input of exactly `reference-fault:endless-error`
 * makes it the adapter gone wrong, answering HTTP 500 with a body that never ends (until the
 * connection goes), so the tests can show the runner and the server bound it.
 */
import { createHash, timingSafeEqual } from "node:crypto";
import { appendFileSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import {
  ADAPTER_PORT,
  AdapterRequest,
  type ResultRecord,
  type StreamEvent,
  type Usage,
} from "../contracts/adapter.ts";

const env = {
  port: Number(process.env.ADAPTER_PORT ?? ADAPTER_PORT),
  token: process.env.ADAPTER_TOKEN ?? "",
  modelBaseUrl: process.env.MODEL_BASE_URL ?? "",
  modelApiKey: process.env.MODEL_API_KEY ?? "",
  model: process.env.MODEL_NAME ?? "reference-model",
  streaming: process.env.ADAPTER_STREAMING === "true",
  maxBodyBytes: Number(process.env.ADAPTER_MAX_BODY_BYTES ?? 256 * 1024),
  requestTimeoutMs: Number(process.env.ADAPTER_REQUEST_TIMEOUT_MS ?? 60_000),
  workspace: process.env.AGENT_WORKSPACE ?? "/workspace",
};
const conversationFile = `${env.workspace}/conversation.json`;
const resultsFile = `${env.workspace}/results.ndjson`;
mkdirSync(env.workspace, { recursive: true });

type Message = { role: "user" | "assistant" | "system"; content: string };
function loadConversation(): Message[] {
  try {
    return JSON.parse(readFileSync(conversationFile, "utf8")) as Message[];
  } catch {
    return [];
  }
}

const inflight = new Map<string, AbortController>();
const results = new Map<string, ResultRecord>();
let draining = false;

function tokenMatches(header: string | undefined): boolean {
  if (!env.token) return false;
  const given = header?.startsWith("Bearer ") ? header.slice(7) : "";
  const a = createHash("sha256").update(given).digest();
  const b = createHash("sha256").update(env.token).digest();
  return timingSafeEqual(a, b);
}

function send(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { "content-type": "application/json" });
  res.end(JSON.stringify(body));
}

async function readBody(req: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > env.maxBodyBytes) throw Object.assign(new Error("body too large"), { status: 413 });
    chunks.push(chunk);
  }
  return Buffer.concat(chunks).toString("utf8");
}

type ModelReply = { text: string; usage: Usage };

/** Calls the model; when `onDelta` is given, asks for a streamed reply and forwards deltas. */
async function callModel(
  messages: Message[],
  signal: AbortSignal,
  onDelta?: (t: string) => void,
): Promise<ModelReply> {
  if (!env.modelBaseUrl) throw new Error("no model endpoint configured (the Agent allows no credential)");
  const res = await fetch(`${env.modelBaseUrl.replace(/\/$/, "")}/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: `Bearer ${env.modelApiKey}` },
    body: JSON.stringify({
      model: env.model,
      messages,
      stream: Boolean(onDelta),
      ...(onDelta ? { stream_options: { include_usage: true } } : {}),
    }),
    signal,
    redirect: "error",
  });
  if (!res.ok) throw new Error(`model endpoint answered ${res.status}`);
  if (!onDelta) {
    const body = (await res.json()) as {
      choices?: { message?: { content?: string } }[];
      usage?: { prompt_tokens?: number; completion_tokens?: number };
    };
    return { text: body.choices?.[0]?.message?.content ?? "", usage: usageOf(body.usage) };
  }
  let text = "";
  let usage: Usage = "unavailable";
  let buffer = "";
  const decoder = new TextDecoder();
  for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
    buffer += decoder.decode(chunk, { stream: true });
    const lines = buffer.split("\n");
    buffer = lines.pop() ?? "";
    for (const line of lines) {
      if (!line.startsWith("data:")) continue;
      const data = line.slice(5).trim();
      if (data === "[DONE]") continue;
      const event = JSON.parse(data) as {
        choices?: { delta?: { content?: string } }[];
        usage?: { prompt_tokens?: number; completion_tokens?: number } | null;
      };
      const delta = event.choices?.[0]?.delta?.content;
      if (delta) {
        text += delta;
        onDelta(delta);
      }
      if (event.usage) usage = usageOf(event.usage);
    }
  }
  return { text, usage };
}

function usageOf(u: { prompt_tokens?: number; completion_tokens?: number } | null | undefined): Usage {
  if (!u || typeof u.prompt_tokens !== "number" || typeof u.completion_tokens !== "number")
    return "unavailable";
  return { input_tokens: u.prompt_tokens, output_tokens: u.completion_tokens };
}

function record(result: ResultRecord): ResultRecord {
  results.set(result.id, result);
  appendFileSync(resultsFile, `${JSON.stringify(result)}\n`);
  return result;
}

/** The input that makes this adapter answer 500 with an endless body (see the header). */
const ENDLESS_ERROR_FAULT = "reference-fault:endless-error";

function endlessError(res: ServerResponse): void {
  res.writeHead(500, { "content-type": "application/json" });
  res.write('{"code":"INTERNAL","message":"');
  const piece = Buffer.alloc(64 * 1024, 0x65);
  const pump = () => {
    while (!res.destroyed && res.write(piece));
    if (!res.destroyed) res.once("drain", pump);
  };
  pump();
}

async function handleRequest(req: IncomingMessage, res: ServerResponse): Promise<void> {
  const parsed = AdapterRequest.safeParse(JSON.parse(await readBody(req)));
  if (!parsed.success)
    return send(res, 400, {
      code: "INVALID_ARGUMENT",
      message: parsed.error.issues[0]?.message ?? "invalid request",
    });
  const request = parsed.data;
  if (request.input === ENDLESS_ERROR_FAULT) return endlessError(res);
  if (request.stream && !env.streaming)
    return send(res, 400, { code: "INVALID_ARGUMENT", message: "this runtime does not declare streaming" });
  if (inflight.has(request.id) || results.has(request.id))
    return send(res, 409, { code: "ALREADY_EXISTS", message: `request ${request.id} exists` });
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(new Error("request timed out")), env.requestTimeoutMs);
  inflight.set(request.id, controller);
  // A client that goes away cancels the work.
  res.on("close", () => {
    if (!res.writableFinished) controller.abort(new Error("client disconnected"));
  });
  const startedAt = new Date().toISOString();
  const conversation = loadConversation();
  const messages: Message[] = [...conversation, { role: "user", content: request.input }];
  const writeEvent = (event: StreamEvent) => res.write(`data: ${JSON.stringify(event)}\n\n`);
  if (request.stream)
    res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-store" });
  let result: ResultRecord;
  try {
    const reply = await callModel(
      messages,
      controller.signal,
      request.stream ? (t) => writeEvent({ type: "delta", text: t }) : undefined,
    );
    writeFileSync(
      conversationFile,
      JSON.stringify([...messages, { role: "assistant", content: reply.text }]),
    );
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
  if (req.method === "GET" && url.pathname === "/readyz")
    return send(res, draining ? 503 : 200, { ready: !draining, inflight: inflight.size });
  if (!tokenMatches(req.headers.authorization))
    return send(res, 401, { code: "UNAUTHENTICATED", message: "adapter token required" });
  if (req.method === "POST" && url.pathname === "/v1/requests") {
    if (draining) return send(res, 503, { code: "UNAVAILABLE", message: "adapter is shutting down" });
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
server.requestTimeout = env.requestTimeoutMs + 5_000;
server.listen(env.port, "0.0.0.0");

// Graceful shutdown: refuse new work, let in-flight requests finish, then exit.
process.on("SIGTERM", () => {
  draining = true;
  server.close();
  const poll = setInterval(() => {
    if (inflight.size === 0) {
      clearInterval(poll);
      process.exit(0);
    }
  }, 50);
});
