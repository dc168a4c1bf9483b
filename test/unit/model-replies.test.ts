import { describe, expect, it } from "vitest";
import { type ChatMessage, decide, type OfferedTool, replyFor, usageOf } from "../fixtures/model-replies.ts";

/** pi's tools, as it offers them (parameters trimmed to what matters). */
const tool = (name: string, params: string[]): OfferedTool => ({
  type: "function",
  function: {
    name,
    parameters: {
      properties: Object.fromEntries(params.map((p) => [p, { type: "string" }])),
      required: params,
    },
  },
});
const piTools = [
  tool("read", ["path", "offset", "limit"]),
  tool("bash", ["command"]),
  tool("write", ["path", "content"]),
];
const user = (text: string): ChatMessage => ({ role: "user", content: [{ type: "text", text }] });

describe("the loopback model's replies, decided from the history", () => {
  it("answers text, reading content given as a string or as parts", () => {
    expect(replyFor([{ role: "user", content: "remember kiwi" }])).toBe("OK, I will remember kiwi.");
    expect(
      replyFor([user("remember kiwi"), { role: "assistant", content: "OK" }, user("what was the token?")]),
    ).toBe("The token is kiwi.");
    expect(decide([user("hello [fast]")], piTools)).toEqual({ kind: "text", text: "echo: hello" });
  });

  it("asks for the offered write tool, then answers once its result is in the history", () => {
    const ask = user("write file notes/a.txt with content two words");
    const call = decide([ask], piTools);
    expect(call).toEqual({
      kind: "tool_call",
      name: "write",
      arguments: JSON.stringify({ path: "notes/a.txt", content: "two words" }),
    });
    const history: ChatMessage[] = [
      ask,
      {
        role: "assistant",
        content: null,
        tool_calls: [
          {
            id: "c1",
            type: "function",
            function: { name: "write", arguments: call.kind === "tool_call" ? call.arguments : "" },
          },
        ],
      },
      { role: "tool", tool_call_id: "c1", content: "Successfully wrote 9 bytes" },
    ];
    expect(decide(history, piTools)).toEqual({ kind: "text", text: "I wrote notes/a.txt." });
  });

  it("reads a file with the offered read tool and quotes what the tool returned", () => {
    const ask = user("what is in file notes/a.txt?");
    expect(decide([ask], piTools)).toEqual({
      kind: "tool_call",
      name: "read",
      arguments: JSON.stringify({ path: "notes/a.txt" }),
    });
    const history: ChatMessage[] = [
      ask,
      {
        role: "assistant",
        tool_calls: [
          { id: "c2", type: "function", function: { name: "read", arguments: '{"path":"notes/a.txt"}' } },
        ],
      },
      { role: "tool", tool_call_id: "c2", content: [{ type: "text", text: "two words" }] },
    ];
    expect(decide(history, piTools)).toEqual({ kind: "text", text: "notes/a.txt contains: two words" });
  });

  it("picks a tool by its schema when the name differs, and says so when none fits", () => {
    expect(
      decide([user("write file x with content y")], [tool("create_file", ["path", "content"])]),
    ).toMatchObject({
      kind: "tool_call",
      name: "create_file",
    });
    expect(decide([user("write file x with content y")], [tool("bash", ["command"])])).toEqual({
      kind: "text",
      text: "I have no tool to write files.",
    });
    expect(decide([user("read file x")], [])).toEqual({
      kind: "text",
      text: "I have no tool to read files.",
    });
  });

  it("calls Hermes' write_file and read_file over its patch tool, and reads read_file's numbered JSON", () => {
    const hermesTools = [
      tool("patch", ["path", "old_string", "new_string"]),
      tool("write_file", ["path", "content"]),
      tool("read_file", ["path", "offset", "limit"]),
    ];
    expect(decide([user("write file a.txt with content hi")], hermesTools)).toMatchObject({
      kind: "tool_call",
      name: "write_file",
    });
    const ask = user("what is in file a.txt?");
    expect(decide([ask], hermesTools)).toMatchObject({ kind: "tool_call", name: "read_file" });
    const history: ChatMessage[] = [
      ask,
      {
        role: "assistant",
        tool_calls: [
          { id: "c3", type: "function", function: { name: "read_file", arguments: '{"path":"a.txt"}' } },
        ],
      },
      {
        role: "tool",
        tool_call_id: "c3",
        content: JSON.stringify({ content: "1|hi there", total_lines: 1 }),
      },
    ];
    expect(decide(history, hermesTools)).toEqual({ kind: "text", text: "a.txt contains: hi there" });
  });

  it("counts words for usage: the history in, the reply out", () => {
    expect(usageOf([user("remember kiwi")], { kind: "text", text: "OK, I will remember kiwi." })).toEqual({
      prompt_tokens: 2,
      completion_tokens: 5,
      total_tokens: 7,
    });
  });
});

describe("the turn a person asked for", () => {
  it("is the last user message, or the one before a harness's continuation note", async () => {
    const { turnUserText } = await import("../fixtures/model-replies.ts");
    const user = (content: string) => ({ role: "user" as const, content });
    expect(turnUserText([user("first"), user("hello [garbage]")])).toBe("hello [garbage]");
    expect(
      turnUserText([
        user("hello [garbage]"),
        { role: "assistant" as const, content: "half " },
        user(
          "[System: The previous response was cut off by a network error mid-stream. Continue exactly where you left off.]",
        ),
      ]),
    ).toBe("hello [garbage]");
  });
});
