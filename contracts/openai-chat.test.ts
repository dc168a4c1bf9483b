import { describe, expect, it } from "vitest";
import { ChatCompletionRequest, turnOf } from "./openai-chat.ts";

describe("ChatCompletionRequest and turnOf", () => {
  it("takes the last user message as the turn, whatever follows it, text parts joined by newlines", () => {
    const request = ChatCompletionRequest.parse({
      messages: [
        { role: "user", content: "old" },
        {
          role: "user",
          content: [
            { type: "text", text: "a" },
            { type: "text", text: "b" },
          ],
        },
        { role: "assistant", content: null, tool_calls: [{ id: "1" }] },
        { role: "tool", content: "result" },
      ],
      temperature: 0.2,
    });
    expect(turnOf(request)).toBe("a\nb");
  });

  it("refuses an assistant message without content unless it carries tool_calls", () => {
    const parsed = ChatCompletionRequest.safeParse({
      messages: [
        { role: "user", content: "x" },
        { role: "assistant", content: null },
      ],
    });
    expect(parsed.success).toBe(false);
    expect(parsed.error?.issues[0]?.path).toEqual(["messages", 1, "content"]);
  });

  it("accepts n: 1 and null options, as clients send them", () => {
    const parsed = ChatCompletionRequest.safeParse({
      messages: [{ role: "user", content: "x" }],
      n: 1,
      stream: null,
      stream_options: null,
    });
    expect(parsed.success).toBe(true);
  });
});
