import { describe, expect, it } from "vitest";
import { JsonReplyWatcher, SseReplyWatcher, usageOf } from "./provider-usage.ts";

const delta = (content: string) =>
  `data: ${JSON.stringify({ choices: [{ index: 0, delta: { content } }] })}\n\n`;
const usageChunk = `data: ${JSON.stringify({ model: "m-1", choices: [], usage: { prompt_tokens: 7, completion_tokens: 3 } })}\n\n`;

/** Feeds the text in pieces of `size` bytes; what would be forwarded, joined. */
function feed(watcher: SseReplyWatcher, text: string, size: number): string {
  const bytes = Buffer.from(text);
  let out = "";
  for (let i = 0; i < bytes.length; i += size) out += watcher.push(bytes.subarray(i, i + size)).toString();
  return out + watcher.end();
}

describe("usageOf", () => {
  it("reads OpenAI's and the input/output names, and nothing that is not a token count", () => {
    expect(usageOf({ usage: { prompt_tokens: 1, completion_tokens: 2 } })).toEqual({
      input_tokens: 1,
      output_tokens: 2,
    });
    expect(usageOf({ usage: { input_tokens: 4, output_tokens: 5 } })).toEqual({
      input_tokens: 4,
      output_tokens: 5,
    });
    expect(usageOf({ usage: null })).toBeUndefined();
    expect(usageOf({ usage: { prompt_tokens: -1, completion_tokens: 2 } })).toBeUndefined();
    expect(usageOf({ usage: { prompt_tokens: "1", completion_tokens: 2 } })).toBeUndefined();
  });
});

describe("SseReplyWatcher", () => {
  const stream = delta("Hello ") + delta("world") + usageChunk + "data: [DONE]\n\n";

  it("strips the usage-only chunk it asked for, wherever the pieces are cut, and reads its usage", () => {
    for (const size of [1, 3, 17, stream.length]) {
      const watcher = new SseReplyWatcher({ strip: true });
      expect(feed(watcher, stream, size)).toBe(delta("Hello ") + delta("world") + "data: [DONE]\n\n");
      expect(watcher.usage).toEqual({ input_tokens: 7, output_tokens: 3 });
      expect(watcher.model).toBe("m-1");
    }
  });

  it("forwards every piece as it comes when the client asked for the usage itself", () => {
    const watcher = new SseReplyWatcher({ strip: false });
    const piece = Buffer.from(delta("Hel"));
    expect(watcher.push(piece)).toBe(piece);
    expect(feed(watcher, usageChunk.replaceAll("\n", "\r\n"), 5)).toBe(usageChunk.replaceAll("\n", "\r\n"));
    expect(watcher.usage).toEqual({ input_tokens: 7, output_tokens: 3 });
  });

  it("forwards a whole event at once when stripping: nothing of it is held past its blank line", () => {
    const watcher = new SseReplyWatcher({ strip: true });
    expect(watcher.push(Buffer.from(delta("a").slice(0, 10)))).toBe("");
    expect(watcher.push(Buffer.from(delta("a").slice(10)))).toBe(delta("a"));
  });

  it("strips a usage chunk of `usage: null` too, and has no usage then", () => {
    const watcher = new SseReplyWatcher({ strip: true });
    expect(feed(watcher, `${delta("x")}data: {"choices":[],"usage":null}\n\ndata: [DONE]\n\n`, 4)).toBe(
      `${delta("x")}data: [DONE]\n\n`,
    );
    expect(watcher.usage).toBeUndefined();
  });
});

describe("usage of other APIs' streams", () => {
  const event = (type: string, data: unknown) => `event: ${type}\ndata: ${JSON.stringify(data)}\n\n`;

  it("Anthropic Messages: input from message_start, output from the last message_delta", () => {
    const stream =
      event("message_start", {
        type: "message_start",
        message: { model: "claude-x", usage: { input_tokens: 25, output_tokens: 1 } },
      }) +
      event("content_block_delta", {
        type: "content_block_delta",
        delta: { type: "text_delta", text: "Hi" },
      }) +
      event("message_delta", {
        type: "message_delta",
        delta: { stop_reason: "end_turn" },
        usage: { output_tokens: 15 },
      }) +
      event("message_stop", { type: "message_stop" });
    const watcher = new SseReplyWatcher({ strip: false });
    expect(feed(watcher, stream, 7)).toBe(stream);
    expect(watcher).toMatchObject({ model: "claude-x", usage: { input_tokens: 25, output_tokens: 15 } });
  });

  it("OpenAI Responses: from response.completed", () => {
    const stream =
      event("response.output_text.delta", { type: "response.output_text.delta", delta: "Hi" }) +
      event("response.completed", {
        type: "response.completed",
        response: { model: "gpt-x", usage: { input_tokens: 9, output_tokens: 2, total_tokens: 11 } },
      });
    const watcher = new SseReplyWatcher({ strip: false });
    feed(watcher, stream, 11);
    expect(watcher).toMatchObject({ model: "gpt-x", usage: { input_tokens: 9, output_tokens: 2 } });
  });
});

describe("JsonReplyWatcher", () => {
  it("forwards the body untouched and reads usage and model at its end", () => {
    const watcher = new JsonReplyWatcher();
    const body = JSON.stringify({
      model: "m-2",
      choices: [],
      usage: { prompt_tokens: 2, completion_tokens: 9 },
    });
    const a = Buffer.from(body.slice(0, 20));
    expect(watcher.push(a)).toBe(a);
    watcher.push(Buffer.from(body.slice(20)));
    expect(watcher.end()).toBe("");
    expect(watcher).toMatchObject({ model: "m-2", usage: { input_tokens: 2, output_tokens: 9 } });
  });

  it("has no usage for a body that is not JSON", () => {
    const watcher = new JsonReplyWatcher();
    watcher.push(Buffer.from("<html>"));
    watcher.end();
    expect(watcher.usage).toBeUndefined();
  });
});
