import type { MiddlewareHandler } from "hono";
import { ResultRecord, StreamEvent } from "../../contracts/adapter.ts";
import { ErrorCode } from "../../contracts/errors.ts";
import type { Audit, AuditRecord } from "../observability/audit.ts";
import {
  AUDITED_REPLY,
  AUDITED_REQUEST_ID,
  AUDITED_STREAM_END,
  AUDITED_STREAM_END_MARKED,
} from "../observability/audited-request.ts";
import type { ProxiedOutcome } from "../observability/metrics.ts";
import { SseSplitter } from "../relay/sse-splitter.ts";

/** Refusals before the request reached the agent (the session is not Ready, bad input, …). */
const REJECTIONS = new Set<string>([
  "INVALID_ARGUMENT",
  "NOT_FOUND",
  "ALREADY_EXISTS",
  "FAILED_PRECONDITION",
  "UNAUTHENTICATED",
  "PERMISSION_DENIED",
]);

type Ending = Pick<AuditRecord, "outcome" | "code" | "usage" | "request_id">;

/**
 * Audits every reply of `POST …/harnesssessions/{name}/requests` from what the proxy answered
 * (its documented reply shapes, contracts/harness-session.ts): a JSON reply when it is complete,
 * a streamed one when its last event has passed (or the client went away). Mount it on that
 * route after authentication, and on `…/openai/v1/chat/completions`, whose replies the relay
 * marks in our shape (observability/audited-request.ts).
 */
export function auditProxiedRequests(audit: Audit): MiddlewareHandler {
  return async (c, next) => {
    if (c.req.method !== "POST") return next();
    const started = performance.now();
    const namespace = c.req.param("ns") ?? "";
    const session = c.req.param("name") ?? "";
    await next();
    const response = c.res;
    // Set by `authenticate` (absent where a test mounts this alone).
    const principal = c.get("principal") as { id: string; name: string } | undefined;
    const base = {
      http_request_id: c.get("requestId"),
      namespace,
      session,
      ...(principal ? { token_id: principal.id, token_name: principal.name } : {}),
    };
    // The id the relay gave the request is the audited one; an adapter's record may name any id.
    const ours = c.get(AUDITED_REQUEST_ID);
    const done = (ending: Ending, stream: boolean) =>
      audit({
        ...base,
        ...ending,
        ...(ours !== undefined ? { request_id: ours } : {}),
        stream,
        duration_ms: performance.now() - started,
      });
    if (response.headers.get("content-type")?.startsWith("text/event-stream") && response.body) {
      // The relay's mark of how the stream ended, when its events are not in our shape.
      const marked = () => {
        const end = c.get(AUDITED_STREAM_END);
        return end ? (end.ending ?? endingOfEvent(end.body)) : undefined;
      };
      // A stream whose end the relay marks is not parsed on its way (its events are the
      // relay's own: its mark says what the last one said).
      const inspect = c.get(AUDITED_STREAM_END_MARKED) !== true;
      c.res = new Response(
        watchStream(response.body, marked, (ending) => done(ending, true), inspect),
        response,
      );
      return;
    }
    // The relay's own answer, unless an error replaced it on its way out.
    const marked = c.error === undefined ? c.get(AUDITED_REPLY) : undefined;
    if (marked?.ending) {
      done(marked.ending, false);
      return;
    }
    const body: unknown = marked
      ? marked.body
      : await response
          .clone()
          .json()
          .catch(() => undefined);
    done(fromJsonReply(response.status, body), false);
  };
}

/** How a JSON reply ended: the result record when there is one, else the error's code. */
export function fromJsonReply(status: number, body: unknown): Ending {
  const record = ResultRecord.safeParse(body);
  if (status < 300 && record.success)
    return { outcome: record.data.outcome, usage: record.data.usage, request_id: record.data.id };
  const error = body as { code?: unknown; details?: { result?: unknown; request_id?: unknown } } | undefined;
  const code = ErrorCode.safeParse(error?.code);
  const attached = ResultRecord.safeParse(error?.details?.result);
  if (attached.success)
    return {
      outcome: attached.data.outcome,
      code: code.success ? code.data : undefined,
      usage: attached.data.usage,
      request_id: attached.data.id,
    };
  const requestId = typeof error?.details?.request_id === "string" ? error.details.request_id : undefined;
  return {
    outcome: outcomeOfCode(code.success ? code.data : undefined, status),
    code: code.success ? code.data : "INTERNAL",
    usage: undefined,
    request_id: requestId,
  };
}

function outcomeOfCode(code: ErrorCode | undefined, status: number): ProxiedOutcome {
  if (code === "CANCELLED") return "cancelled";
  // 413: the request body was too large; nothing was relayed.
  if ((code && REJECTIONS.has(code)) || status === 413) return "rejected";
  return "failed";
}

/**
 * The streamed reply passed through unchanged, chunk by chunk at the client's pace; its
 * `result` or `error` event decides the ending (with `inspect`; else the relay's mark), reported
 * once when the stream ends or is cancelled (a client that left before the result is a
 * cancelled request).
 */
function watchStream(
  body: ReadableStream<Uint8Array>,
  marked: () => Ending | undefined,
  end: (ending: Ending) => void,
  inspect: boolean,
): ReadableStream {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  const splitter = new SseSplitter();
  let ending: Ending | undefined;
  let reported = false;
  const report = (fallback: Ending) => {
    if (reported) return;
    reported = true;
    end(ending ?? marked() ?? fallback);
  };
  const inspectChunk = (chunk: Uint8Array) => {
    for (const data of splitter.push(decoder.decode(chunk, { stream: true }))) {
      let json: unknown;
      try {
        json = JSON.parse(data);
      } catch {
        continue;
      }
      ending = endingOfEvent(json) ?? ending;
    }
  };
  return new ReadableStream<Uint8Array>({
    async pull(controller) {
      try {
        const { done, value } = await reader.read();
        if (done) {
          report({ outcome: "failed", code: "INTERNAL", usage: undefined, request_id: undefined });
          controller.close();
          return;
        }
        if (inspect) inspectChunk(value);
        controller.enqueue(value);
      } catch (error) {
        report({ outcome: "failed", code: "INTERNAL", usage: undefined, request_id: undefined });
        controller.error(error);
      }
    },
    async cancel(reason) {
      report({ outcome: "cancelled", code: "CANCELLED", usage: undefined, request_id: undefined });
      await reader.cancel(reason);
    },
  });
}

/** The ending one event of our stream says: its result record, or its error's code; else none. */
function endingOfEvent(json: unknown): Ending | undefined {
  const event = StreamEvent.safeParse(json);
  if (event.success)
    return event.data.type === "result"
      ? {
          outcome: event.data.result.outcome,
          usage: event.data.result.usage,
          request_id: event.data.result.id,
        }
      : undefined;
  const code = ErrorCode.safeParse((json as { code?: unknown } | null)?.code);
  if (!code.success) return undefined;
  return { outcome: outcomeOfCode(code.data, 200), code: code.data, usage: undefined, request_id: undefined };
}
