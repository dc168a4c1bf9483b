/**
 * Usage as the provider reported it, read from a reply on its way through the gateway without
 * holding the reply back: a JSON body's `usage`, or a stream's. Three shapes count:
 * OpenAI Chat Completions (`usage.prompt_tokens`/`completion_tokens`; streamed, the last chunk
 * when `stream_options.include_usage` asked: empty `choices` and `usage`), OpenAI Responses
 * (`usage.input_tokens`/`output_tokens`; streamed, in `response.completed`'s `response.usage`) and
 * Anthropic Messages (the same names; streamed, input in `message_start`'s `message.usage`, the
 * output's running total in each `message_delta`'s `usage`).
 */
import { StringDecoder } from "node:string_decoder";

export type ProviderUsage = { input_tokens: number; output_tokens: number };

/** A JSON body larger than this is forwarded but not parsed for usage (its usage is "unavailable"). */
const BODY_PARSE_MAX_BYTES = 16 * 1024 * 1024;
/** The contracts' bound on a token count (contracts/adapter.ts). */
const TOKEN_COUNT_MAX = 1e12;

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function tokenCount(value: unknown): number | undefined {
  return typeof value === "number" && Number.isInteger(value) && value >= 0 && value <= TOKEN_COUNT_MAX
    ? value
    : undefined;
}

/** Token counts one reply object carries, each on its own (a stream may send them apart). */
type Counts = { input: number | undefined; output: number | undefined };

/** The `usage` object of a reply: its own, or its `response`'s (Responses) or `message`'s (Anthropic). */
function usageObject(reply: Record<string, unknown>): Record<string, unknown> | undefined {
  for (const holder of [reply, reply.response, reply.message])
    if (isRecord(holder) && isRecord(holder.usage)) return holder.usage;
  return undefined;
}

function countsOf(reply: unknown): Counts | undefined {
  const usage = isRecord(reply) ? usageObject(reply) : undefined;
  if (!usage) return undefined;
  return {
    input: tokenCount(usage.prompt_tokens ?? usage.input_tokens),
    output: tokenCount(usage.completion_tokens ?? usage.output_tokens),
  };
}

/** The usage of a reply object (a completion, or one streamed chunk); undefined unless it has both counts. */
export function usageOf(reply: unknown): ProviderUsage | undefined {
  const counts = countsOf(reply);
  return counts?.input === undefined || counts.output === undefined
    ? undefined
    : { input_tokens: counts.input, output_tokens: counts.output };
}

function modelOf(reply: unknown): string | undefined {
  if (!isRecord(reply)) return undefined;
  for (const holder of [reply, reply.response, reply.message])
    if (isRecord(holder) && typeof holder.model === "string" && holder.model !== "") return holder.model;
  return undefined;
}

/** What a watcher saw of a reply once it ended (or was cut off). */
export type ReplyReading = { usage: ProviderUsage | undefined; model: string | undefined };

export type ReplyWatcher = ReplyReading & {
  /** Takes a piece of the reply as it arrives; returns what to forward now. */
  push(piece: Buffer): Buffer | string;
  /** At the reply's end: whatever is still held, to forward. */
  end(): string;
};

/** A whole JSON reply: every piece forwarded at once, a copy kept (bounded) to read at the end. */
export class JsonReplyWatcher implements ReplyWatcher {
  usage: ProviderUsage | undefined;
  model: string | undefined;
  readonly #pieces: Buffer[] = [];
  #bytes = 0;

  push(piece: Buffer): Buffer {
    this.#bytes += piece.length;
    if (this.#bytes <= BODY_PARSE_MAX_BYTES) this.#pieces.push(piece);
    else this.#pieces.length = 0;
    return piece;
  }

  end(): string {
    if (this.#bytes > 0 && this.#bytes <= BODY_PARSE_MAX_BYTES) {
      try {
        const reply: unknown = JSON.parse(Buffer.concat(this.#pieces).toString("utf8"));
        this.usage = usageOf(reply);
        this.model = modelOf(reply);
      } catch {
        // Not JSON (an HTML error page, a cut-off body): no usage to read, nothing else to do.
      }
    }
    this.#pieces.length = 0;
    return "";
  }
}

/** Where one server-sent event ends (a blank line; any of the three line ends the spec allows). */
const EVENT_END = /\r\n\r\n|\n\n|\r\r/g;
/** An event held longer than this (in characters) is passed on as it is. */
const EVENT_MAX_CHARS = 1024 * 1024;

/**
 * A server-sent event stream (WHATWG HTML §9.2 "Server-sent events"). Without `strip`, every piece
 * is forwarded as it comes and a copy is read event by event. With `strip` (the gateway asked for
 * the usage chunk, the client did not), whole events are forwarded as soon as their blank line
 * arrives, except the usage-only chunk the client never asked for.
 */
export class SseReplyWatcher implements ReplyWatcher {
  usage: ProviderUsage | undefined;
  model: string | undefined;
  readonly #strip: boolean;
  readonly #decoder = new StringDecoder("utf8");
  #pending = "";
  #input: number | undefined;
  #output: number | undefined;

  constructor(options: { strip: boolean }) {
    this.#strip = options.strip;
  }

  push(piece: Buffer): Buffer | string {
    this.#pending += this.#decoder.write(piece);
    let forward = "";
    let start = 0;
    EVENT_END.lastIndex = 0;
    for (let end = EVENT_END.exec(this.#pending); end !== null; end = EVENT_END.exec(this.#pending)) {
      const event = this.#pending.slice(start, end.index + end[0].length);
      start = end.index + end[0].length;
      if (this.#read(event) || !this.#strip) forward += event;
    }
    this.#pending = this.#pending.slice(start);
    if (this.#pending.length > EVENT_MAX_CHARS) {
      // Not an event stream after all (no blank line in a megabyte): passed on, not held.
      if (this.#strip) forward += this.#pending;
      this.#pending = "";
    }
    return this.#strip ? forward : piece;
  }

  end(): string {
    const rest = this.#pending + this.#decoder.end();
    this.#pending = "";
    if (rest === "") return "";
    const keep = this.#read(rest);
    return this.#strip && keep ? rest : "";
  }

  /** Reads one event's data; false when it is a usage-only chunk (to strip). */
  #read(event: string): boolean {
    const data = dataOf(event);
    // Most chunks are content deltas: parsed only when they can carry what is looked for.
    if (
      data === undefined ||
      !(data.includes('"usage"') || (this.model === undefined && data.includes('"model"')))
    )
      return true;
    let chunk: unknown;
    try {
      chunk = JSON.parse(data);
    } catch {
      return true;
    }
    this.model ??= modelOf(chunk);
    // Each count as last reported (Anthropic sends input first and a running output total later).
    const counts = countsOf(chunk);
    if (counts?.input !== undefined) this.#input = counts.input;
    if (counts?.output !== undefined) this.#output = counts.output;
    if (this.#input !== undefined && this.#output !== undefined)
      this.usage = { input_tokens: this.#input, output_tokens: this.#output };
    // `usage: null` too: the provider's answer to a question the client never asked.
    return !(
      isRecord(chunk) &&
      Array.isArray(chunk.choices) &&
      chunk.choices.length === 0 &&
      "usage" in chunk
    );
  }
}

/** The event's `data` lines joined (SSE: one optional space after the colon). */
function dataOf(event: string): string | undefined {
  let data: string | undefined;
  for (const line of event.split(/\r\n|\n|\r/)) {
    if (!line.startsWith("data:")) continue;
    const value = line.charCodeAt(5) === 32 ? line.slice(6) : line.slice(5);
    data = data === undefined ? value : `${data}\n${value}`;
  }
  return data;
}
