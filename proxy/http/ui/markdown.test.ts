import { describe, expect, it } from "vitest";
import { parseInline, parseMarkdown } from "./markdown.ts";

describe("the UI's markdown", () => {
  it("reads paragraphs, headings, lists, quotes and fenced code", () => {
    const blocks = parseMarkdown(
      "# Plan\n\nFirst line\nsecond line\n\n- one\n- **two**\n\n1. a\n2) b\n\n> quoted\n\n```ts\nconst x = 1;\n\nx++;\n```\nafter",
    );
    expect(blocks.map((b) => b.t)).toEqual(["h", "p", "ul", "ol", "quote", "pre", "p"]);
    expect(blocks[0]).toEqual({ t: "h", level: 1, children: [{ t: "text", text: "Plan" }] });
    expect(blocks[1]).toEqual({ t: "p", children: [{ t: "text", text: "First line\nsecond line" }] });
    expect(blocks[5]).toEqual({ t: "pre", lang: "ts", text: "const x = 1;\n\nx++;" });
  });

  it("keeps an unclosed fence (a reply still streaming) as code to the end", () => {
    expect(parseMarkdown("look:\n```\nline 1\nline 2")).toEqual([
      { t: "p", children: [{ t: "text", text: "look:" }] },
      { t: "pre", lang: "", text: "line 1\nline 2" },
    ]);
  });

  it("reads inline code, strong, emphasis and safe links; markup stays text", () => {
    expect(parseInline("run `npm test` **now**, *please* [docs](https://example.com/a)")).toEqual([
      { t: "text", text: "run " },
      { t: "code", text: "npm test" },
      { t: "text", text: " " },
      { t: "strong", children: [{ t: "text", text: "now" }] },
      { t: "text", text: ", " },
      { t: "em", children: [{ t: "text", text: "please" }] },
      { t: "text", text: " " },
      { t: "link", href: "https://example.com/a", children: [{ t: "text", text: "docs" }] },
    ]);
    // A script URL is not a link; HTML is plain text (rendered with textContent).
    expect(parseInline("[x](javascript:alert(1)) <img src=x onerror=alert(1)>")).toEqual([
      { t: "text", text: "[x](javascript:alert(1)) <img src=x onerror=alert(1)>" },
    ]);
    // snake_case names are not emphasis; `2 * 3 * 4` is not either.
    expect(parseInline("read my_file_name and 2 * 3 * 4")).toEqual([
      { t: "text", text: "read my_file_name and 2 * 3 * 4" },
    ]);
  });
});
