import type { ResultRecord, StreamEvent } from "../../contracts/adapter.ts";
import type { ApiErrorBody } from "../../contracts/errors.ts";
import { HarnessRequest } from "../../contracts/harness-session.ts";
import { parseInput } from "../lifecycle/request-body.ts";

/**
 * How one relayed request is asked and answered: the body parsed into the turn the relay sends
 * (contracts/harness-session.ts HarnessRequest), and the reply's shape. The relay, its
 * accounting, audit, limits and cancellation are the same whatever the shape
 * (request-relay.ts); `…/requests` speaks our own (nativeFormat), `…/openai/v1/chat/completions`
 * OpenAI's (openai-chat-format.ts). Errors are always thrown or answered as `{code, message}`
 * JSON: a route with another error shape rewrites them on their way out.
 */
export type ReplyFormat = (body: unknown) => { request: HarnessRequest; reply: ReplyShape };

/** The reply of one request. Stream methods return SSE text (possibly empty) to write as it is. */
export type ReplyShape = {
  /** The body of a non-streamed 200 (a succeeded result record, usage as the server counts it). */
  whole(record: ResultRecord): unknown;
  /** One event of a streamed reply, as the adapter sent it. */
  event(event: Exclude<StreamEvent, { type: "result" }>): string;
  /** The stream's end: the result record when the adapter sent one. */
  end(result: ResultRecord | undefined): string;
  /** The stream ended by a failure after its first byte (with the result record when one came). */
  error(error: ApiErrorBody, result: ResultRecord | undefined): string;
};

/** One SSE event as `writeSSE` frames it: JSON has no line breaks, so its data is one line. */
export function sseEvent(event: string, data: unknown): string {
  return `event: ${event}\ndata: ${JSON.stringify(data)}\n\n`;
}

const nativeShape: ReplyShape = {
  whole: (record) => record,
  event: (event) => sseEvent(event.type, event),
  end: (result) => (result ? sseEvent("result", { type: "result", result }) : ""),
  error: (error, result) => nativeShape.end(result) + sseEvent("error", error),
};

/** `POST …/requests`: `{input, stream?, id?}`; the result record; `event: delta|tool|result|error`. */
export const nativeFormat: ReplyFormat = (body) => ({
  request: parseInput(HarnessRequest, body, "request"),
  reply: nativeShape,
});
