import { randomBytes } from "node:crypto";
import type { GatewayUsage, ResultRecord, Usage } from "../../contracts/adapter.ts";
import type { ApiErrorBody } from "../../contracts/errors.ts";
import { HarnessRequest } from "../../contracts/harness-session.ts";
import {
  type ChatCompletion,
  ChatCompletionRequest,
  type ChatCompletionChunk,
  type ChatUsage,
  turnOf,
} from "../../contracts/openai-chat.ts";
import { parseInput } from "../lifecycle/request-body.ts";
import { openAIError } from "./openai-error.ts";
import type { ReplyFormat, ReplyShape } from "./reply-format.ts";

/**
 * The OpenAI Chat Completions shape of a relayed request (issue 41; OpenAI's API reference,
 * "Create chat completion" and "The chat completion chunk object"). The last `user` message is
 * the turn; the request id is the completion's id (`chatcmpl-…`), so `…/requests/{id}/cancel`
 * cancels it. Non-streamed: one `chat.completion` with the agent's text and usage. Streamed:
 * `data: <chat.completion.chunk>` events (the first carries the assistant role, the last the
 * finish reason, then the usage chunk when `stream_options.include_usage`), then `data: [DONE]`;
 * a failure after the first byte is `data: {"error": …}` without `[DONE]`, as OpenAI's clients
 * read it. The agent's tool events are its own business and not sent.
 */
export function openAIChatFormat(session: string, now: () => Date = () => new Date()): ReplyFormat {
  return (body) => {
    const chat = parseInput(ChatCompletionRequest, body, "chat completion request");
    const id = `chatcmpl-${randomBytes(12).toString("hex")}`;
    const request = parseInput(
      HarnessRequest,
      { input: turnOf(chat), stream: chat.stream === true, id },
      "turn (the last user message)",
    );
    const reply = chatReply({
      id,
      model: chat.model ?? session,
      created: Math.floor(now().getTime() / 1000),
      includeUsage: chat.stream_options?.include_usage === true,
    });
    return { request, reply };
  };
}

type ChatReplyOptions = { id: string; model: string; created: number; includeUsage: boolean };

/** The reply of one chat completion; streamed state (role sent, text sent) lives here. */
function chatReply(o: ChatReplyOptions): ReplyShape {
  let roleSent = false;
  let textSent = false;
  const chunk = (
    delta: ChatCompletionChunk["choices"][number]["delta"],
    finish: "stop" | null = null,
  ): string => {
    if (!roleSent) {
      roleSent = true;
      delta = { role: "assistant", ...delta };
    }
    return data({
      id: o.id,
      object: "chat.completion.chunk",
      created: o.created,
      model: o.model,
      choices: [{ index: 0, delta, finish_reason: finish, logprobs: null }],
      ...(o.includeUsage ? { usage: null } : {}),
    } satisfies ChatCompletionChunk);
  };
  return {
    whole: (record) => {
      const usage = chatUsage(record.usage);
      return {
        id: o.id,
        object: "chat.completion",
        created: o.created,
        model: o.model,
        choices: [
          {
            index: 0,
            message: { role: "assistant", content: record.output ?? "", refusal: null },
            finish_reason: "stop",
            logprobs: null,
          },
        ],
        ...(usage ? { usage } : {}),
      } satisfies ChatCompletion;
    },
    event: (event) => {
      if (event.type !== "delta" || event.text === "") return "";
      textSent = true;
      return chunk({ content: event.text });
    },
    end: (result) => {
      if (!result)
        return data(openAIError(502, { code: "UNAVAILABLE", message: "the agent ended without a result" }));
      if (result.outcome !== "succeeded") return data(openAIError(502, failure(o.id, result)));
      // A runtime that sent its answer only in the result record still streams it.
      let text = !textSent && result.output ? chunk({ content: result.output }) : "";
      text += chunk({}, "stop");
      if (o.includeUsage)
        text += data({
          id: o.id,
          object: "chat.completion.chunk",
          created: o.created,
          model: o.model,
          choices: [],
          usage: chatUsage(result.usage) ?? null,
        } satisfies ChatCompletionChunk);
      return `${text}data: [DONE]\n\n`;
    },
    error: (error: ApiErrorBody) => data(openAIError(502, error)),
  };
}

/** A failed or cancelled result record as the error the non-streamed route would answer. */
function failure(id: string, record: ResultRecord): ApiErrorBody {
  return record.outcome === "cancelled"
    ? { code: "CANCELLED", message: `request ${id} was cancelled` }
    : {
        code: "UNAVAILABLE",
        message: `the agent could not complete request ${id}: ${record.error ?? "failed"}`,
      };
}

/** OpenAI's usage from ours; none when the session has none to give (never a made-up zero). */
export function chatUsage(usage: GatewayUsage | Usage): ChatUsage | undefined {
  if (usage === "unavailable") return undefined;
  return {
    prompt_tokens: usage.input_tokens,
    completion_tokens: usage.output_tokens,
    total_tokens: usage.input_tokens + usage.output_tokens,
  };
}

/** One SSE event of OpenAI's stream: a bare `data:` line (no `event:`: its clients read only data). */
function data(json: unknown): string {
  return `data: ${JSON.stringify(json)}\n\n`;
}
