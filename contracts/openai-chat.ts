import { z } from "zod";

/**
 * The OpenAI Chat Completions API as each HarnessSession answers it (issue 41), at
 * `/v1/namespaces/{ns}/harnesssessions/{name}/openai/v1`: `POST /chat/completions` and
 * `GET /models`. Only what a session can honour is accepted; fields a session has no use for
 * (`temperature`, `tools`, …) are read and ignored, as the Agent decides the model and its
 * settings. The session keeps its own conversation: the last `user` message is the turn sent
 * to the agent; the earlier messages are the client's view of the conversation, checked for
 * shape and not sent (turnOf).
 */

/** The roles OpenAI's API knows; any other is refused. */
export const ChatRole = z.enum(["system", "developer", "user", "assistant", "tool", "function"]);
export type ChatRole = z.infer<typeof ChatRole>;

/** One part of an array content: only `text` parts are accepted (a session takes text turns). */
export const ChatContentPart = z
  .looseObject({ type: z.string(), text: z.unknown().optional() })
  .superRefine((part, ctx) => {
    if (part.type !== "text") {
      ctx.addIssue({
        code: "custom",
        path: ["type"],
        message: `content parts of type "${part.type}" are not accepted; a session takes text parts only`,
      });
      return;
    }
    if (typeof part.text !== "string")
      ctx.addIssue({ code: "custom", path: ["text"], message: "a text part needs its text as a string" });
  });

export const ChatContent = z.union([z.string(), z.array(ChatContentPart).min(1)], {
  error: (issue) =>
    issue.input === undefined || issue.input === null
      ? "a message needs content: a string or an array of text parts"
      : "content must be a string or a non-empty array of text parts",
});

export const ChatMessage = z
  .looseObject({
    role: ChatRole,
    /** Absent or null only on an assistant message that carries `tool_calls` (the client's history). */
    content: z.union([ChatContent, z.null()]).optional(),
    name: z.string().max(256).optional(),
    tool_calls: z.array(z.unknown()).optional(),
  })
  .superRefine((message, ctx) => {
    const empty = message.content === undefined || message.content === null;
    if (empty && !(message.role === "assistant" && message.tool_calls !== undefined))
      ctx.addIssue({
        code: "custom",
        path: ["content"],
        message: "a message needs content: a string or an array of text parts",
      });
  });
export type ChatMessage = z.infer<typeof ChatMessage>;

/** `POST …/openai/v1/chat/completions`. */
export const ChatCompletionRequest = z
  .looseObject({
    /** Echoed in the reply; the Agent's model answers whatever is named here. */
    model: z.string().max(256).optional(),
    messages: z
      .array(ChatMessage, { error: "messages must be an array of messages" })
      .min(1, "messages must hold at least one message")
      .max(1024),
    stream: z.boolean().nullable().optional(),
    stream_options: z.looseObject({ include_usage: z.boolean().nullable().optional() }).nullable().optional(),
    /** One choice a turn: a session gives one answer. */
    n: z
      .number()
      .int()
      .nullable()
      .optional()
      .refine(
        (n) => n === undefined || n === null || n === 1,
        "n must be 1: a session gives one answer a turn",
      ),
  })
  .superRefine((request, ctx) => {
    if (!request.messages.some((m) => m.role === "user"))
      ctx.addIssue({
        code: "custom",
        path: ["messages"],
        message: "messages holds no user message: the last user message is the turn sent to the session",
      });
  });
export type ChatCompletionRequest = z.infer<typeof ChatCompletionRequest>;

/** The turn a request sends: the text of its last `user` message (text parts joined by newlines). */
export function turnOf(request: ChatCompletionRequest): string {
  const last = request.messages.findLast((m) => m.role === "user");
  const content = last?.content;
  if (typeof content === "string") return content;
  return (content ?? []).map((part) => String(part.text)).join("\n");
}

/** OpenAI's usage; absent (or `null` in a stream's usage chunk) when the session has none to give. */
export const ChatUsage = z.object({
  prompt_tokens: z.number().int().nonnegative(),
  completion_tokens: z.number().int().nonnegative(),
  total_tokens: z.number().int().nonnegative(),
});
export type ChatUsage = z.infer<typeof ChatUsage>;

/** A non-streamed reply (`object: "chat.completion"`). */
export const ChatCompletion = z.object({
  id: z.string(),
  object: z.literal("chat.completion"),
  created: z.number().int(),
  model: z.string(),
  choices: z.array(
    z.object({
      index: z.number().int(),
      message: z.object({ role: z.literal("assistant"), content: z.string(), refusal: z.null() }),
      finish_reason: z.literal("stop"),
      logprobs: z.null(),
    }),
  ),
  usage: ChatUsage.optional(),
});
export type ChatCompletion = z.infer<typeof ChatCompletion>;

/** One event of a streamed reply (`object: "chat.completion.chunk"`), sent as `data: <json>`. */
export const ChatCompletionChunk = z.object({
  id: z.string(),
  object: z.literal("chat.completion.chunk"),
  created: z.number().int(),
  model: z.string(),
  choices: z.array(
    z.object({
      index: z.number().int(),
      delta: z.object({ role: z.literal("assistant").optional(), content: z.string().optional() }),
      finish_reason: z.literal("stop").nullable(),
      logprobs: z.null(),
    }),
  ),
  /** Only with `stream_options.include_usage`: null on every chunk but the last, which has no choices. */
  usage: ChatUsage.nullable().optional(),
});
export type ChatCompletionChunk = z.infer<typeof ChatCompletionChunk>;

/** OpenAI's error shape; `code` is our gRPC canonical code, `param` the offending field when known. */
export const OpenAIErrorBody = z.object({
  error: z.object({
    message: z.string(),
    type: z.string(),
    param: z.string().nullable(),
    code: z.string().nullable(),
  }),
});
export type OpenAIErrorBody = z.infer<typeof OpenAIErrorBody>;

/** `GET …/openai/v1/models`: the one model a session answers as (the session's name). */
export const ModelList = z.object({
  object: z.literal("list"),
  data: z.array(
    z.object({ id: z.string(), object: z.literal("model"), created: z.number().int(), owned_by: z.string() }),
  ),
});
export type ModelList = z.infer<typeof ModelList>;
