/**
 * One relayed request to a harness that speaks the `openai-chat` session contract (issue 41:
 * `POST /v1/chat/completions` with OpenAI messages, `stream: true` answering SSE chunks ending in
 * `data: [DONE]`) instead of our adapter contract (contracts/adapter.ts): the request as its
 * body, and its reply translated into ours on the way back, so the server sees one contract. The
 * turn is one user message: the harness keeps its own conversation, as every session does. Its
 * usage is the harness's claim, as any adapter's (the gateway's count is the trusted one).
 *
 * Not streamed: its `chat.completion` becomes our result record. Streamed: each content delta
 * becomes `data: {"type":"delta"}`, the end (`[DONE]`, or the body's end) `data: {"type":"result"}`.
 * A refusal (HTTP status other than 200) becomes a failed result record carrying the harness's
 * error message, answered 502.
 */
import type { ResultRecord, Usage } from "../../contracts/adapter.ts";

export type ExchangeRequest = { id: string; input: string; stream: boolean };

/** The path and body sent to the harness. */
export function openAIChatRequest(req: ExchangeRequest): { path: string; body: string } {
  return {
    path: "/v1/chat/completions",
    body: JSON.stringify({
      model: "session",
      messages: [{ role: "user", content: req.input }],
      stream: req.stream,
      ...(req.stream ? { stream_options: { include_usage: true } } : {}),
    }),
  };
}

/** The harness's reply, piece by piece, as our adapter's would have been. */
export class OpenAIChatReply {
  readonly #req: ExchangeRequest;
  readonly #startedAt: string;
  readonly #now: () => Date;
  #status = 200;
  #pending = "";
  #text = "";
  #usage: Usage = "unavailable";
  #whole = "";
  #ended = false;

  constructor(req: ExchangeRequest, now: () => Date = () => new Date()) {
    this.#req = req;
    this.#now = now;
    this.#startedAt = now().toISOString();
  }

  /** The status the server is told: 200 when the harness answered 200, else 502 (with a failed record). */
  status(harnessStatus: number): number {
    this.#status = harnessStatus;
    return harnessStatus === 200 ? 200 : 502;
  }

  /** One decoded piece of the harness's body: what to send on now (a streamed reply's events). */
  piece(text: string): string {
    if (!this.#req.stream || this.#status !== 200) {
      this.#whole += text;
      return "";
    }
    this.#pending += text;
    let out = "";
    for (let newline = this.#pending.indexOf("\n"); newline !== -1; newline = this.#pending.indexOf("\n")) {
      const line = this.#pending.slice(0, newline).replace(/\r$/, "");
      this.#pending = this.#pending.slice(newline + 1);
      out += this.#line(line);
    }
    return out;
  }

  /** The body's end: a streamed reply's result event, or the whole reply's result record. */
  end(): string {
    if (this.#status !== 200)
      return JSON.stringify(
        this.#record("failed", `the harness answered HTTP ${this.#status}: ${messageOf(this.#whole)}`),
      );
    if (!this.#req.stream) return JSON.stringify(this.#completion());
    const rest = this.#pending === "" ? "" : this.#line(this.#pending);
    this.#pending = "";
    return rest + this.#result();
  }

  #line(line: string): string {
    if (!line.startsWith("data:") || this.#ended) return "";
    const data = line.slice(5).trim();
    if (data === "[DONE]") return this.#result();
    const chunk = parse(data) as {
      choices?: { delta?: { content?: unknown } }[];
      usage?: { prompt_tokens?: unknown; completion_tokens?: unknown } | null;
      error?: { message?: unknown };
    };
    if (chunk?.error) {
      this.#ended = true;
      return event({
        type: "result",
        result: this.#record("failed", String(chunk.error.message ?? "error")),
      });
    }
    const usage = usageOf(chunk?.usage);
    if (usage) this.#usage = usage;
    const content = chunk?.choices?.[0]?.delta?.content;
    if (typeof content !== "string" || content === "") return "";
    this.#text += content;
    return event({ type: "delta", text: content });
  }

  #result(): string {
    if (this.#ended) return "";
    this.#ended = true;
    return event({ type: "result", result: this.#record("succeeded") });
  }

  #completion(): ResultRecord {
    const completion = parse(this.#whole) as {
      choices?: { message?: { content?: unknown } }[];
      usage?: { prompt_tokens?: unknown; completion_tokens?: unknown };
    };
    const content = completion?.choices?.[0]?.message?.content;
    if (typeof content !== "string")
      return this.#record("failed", "the harness answered without a completion");
    this.#text = content;
    this.#usage = usageOf(completion.usage) ?? "unavailable";
    return this.#record("succeeded");
  }

  #record(outcome: "succeeded" | "failed", error?: string): ResultRecord {
    return {
      id: this.#req.id,
      outcome,
      ...(outcome === "succeeded" ? { output: this.#text } : { error: error?.slice(0, 16 * 1024) }),
      usage: outcome === "succeeded" ? this.#usage : "unavailable",
      started_at: this.#startedAt,
      finished_at: this.#now().toISOString(),
    };
  }
}

function usageOf(
  usage: { prompt_tokens?: unknown; completion_tokens?: unknown } | null | undefined,
): Usage | undefined {
  const input = usage?.prompt_tokens;
  const output = usage?.completion_tokens;
  if (
    !Number.isInteger(input) ||
    !Number.isInteger(output) ||
    (input as number) < 0 ||
    (output as number) < 0
  )
    return undefined;
  return { input_tokens: input as number, output_tokens: output as number };
}

function messageOf(body: string): string {
  const message = (parse(body) as { error?: { message?: unknown } } | undefined)?.error?.message;
  return typeof message === "string" ? message.slice(0, 1024) : "no message";
}

function event(data: unknown): string {
  return `data: ${JSON.stringify(data)}\n\n`;
}

function parse(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}
