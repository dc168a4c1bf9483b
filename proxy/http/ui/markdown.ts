// Markdown as an agent writes it (paragraphs, headings, lists, quotes, fenced code, inline code,
// bold, italics, links), parsed into a small tree and built into DOM nodes with textContent only:
// nothing an agent writes becomes HTML, so a reply cannot inject markup or script. Links keep
// http(s) and mailto targets only and open in a new tab without the page as opener.

export type Inline =
  | { t: "text"; text: string }
  | { t: "code"; text: string }
  | { t: "strong"; children: Inline[] }
  | { t: "em"; children: Inline[] }
  | { t: "link"; href: string; children: Inline[] };

export type Block =
  | { t: "p"; children: Inline[] }
  | { t: "h"; level: number; children: Inline[] }
  | { t: "pre"; lang: string; text: string }
  | { t: "ul" | "ol"; items: Inline[][] }
  | { t: "quote"; children: Inline[] };

const FENCE = /^\s*(```+|~~~+)\s*([\w+-]*)\s*$/;
const HEADING = /^(#{1,6})\s+(.*)$/;
const BULLET = /^\s*[-*+]\s+(.*)$/;
const NUMBERED = /^\s*\d{1,9}[.)]\s+(.*)$/;
const QUOTE = /^\s*>\s?(.*)$/;

/** The blocks of `source`; an unclosed fence runs to the end (a reply still streaming). */
export function parseMarkdown(source: string): Block[] {
  const lines = source.replace(/\r\n?/g, "\n").split("\n");
  const blocks: Block[] = [];
  let para: string[] = [];
  const endPara = () => {
    if (para.length) blocks.push({ t: "p", children: parseInline(para.join("\n")) });
    para = [];
  };
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i] ?? "";
    const fence = FENCE.exec(line);
    if (fence) {
      endPara();
      const marker = fence[1] ?? "```";
      const body: string[] = [];
      for (i++; i < lines.length && !(lines[i] ?? "").trim().startsWith(marker); i++)
        body.push(lines[i] ?? "");
      blocks.push({ t: "pre", lang: fence[2] ?? "", text: body.join("\n") });
      continue;
    }
    if (!line.trim()) {
      endPara();
      continue;
    }
    const heading = HEADING.exec(line);
    if (heading) {
      endPara();
      blocks.push({ t: "h", level: (heading[1] ?? "#").length, children: parseInline(heading[2] ?? "") });
      continue;
    }
    const list = BULLET.test(line) ? BULLET : NUMBERED.test(line) ? NUMBERED : undefined;
    if (list) {
      endPara();
      const items: Inline[][] = [];
      for (; i < lines.length && list.test(lines[i] ?? ""); i++)
        items.push(parseInline(list.exec(lines[i] ?? "")?.[1] ?? ""));
      i--;
      blocks.push({ t: list === BULLET ? "ul" : "ol", items });
      continue;
    }
    if (QUOTE.test(line)) {
      endPara();
      const quoted: string[] = [];
      for (; i < lines.length && QUOTE.test(lines[i] ?? ""); i++)
        quoted.push(QUOTE.exec(lines[i] ?? "")?.[1] ?? "");
      i--;
      blocks.push({ t: "quote", children: parseInline(quoted.join("\n")) });
      continue;
    }
    para.push(line);
  }
  endPara();
  return blocks;
}

const SAFE_HREF = /^(https?:\/\/|mailto:)/i;

/** Inline spans of one block's text: `code`, **strong**, *em* / _em_, [text](href). */
export function parseInline(text: string): Inline[] {
  const out: Inline[] = [];
  let plain = "";
  const flush = () => {
    if (plain) out.push({ t: "text", text: plain });
    plain = "";
  };
  let i = 0;
  while (i < text.length) {
    const c = text[i];
    if (c === "`") {
      const end = text.indexOf("`", i + 1);
      if (end > i + 1) {
        flush();
        out.push({ t: "code", text: text.slice(i + 1, end) });
        i = end + 1;
        continue;
      }
    }
    if (c === "*" && text[i + 1] === "*") {
      const end = text.indexOf("**", i + 2);
      if (end > i + 2) {
        flush();
        out.push({ t: "strong", children: parseInline(text.slice(i + 2, end)) });
        i = end + 2;
        continue;
      }
    }
    if ((c === "*" || c === "_") && text[i + 1] !== " " && text[i + 1] !== c) {
      const end = text.indexOf(c, i + 1);
      // `snake_case_names` stay text: an underscore opens emphasis only at a word's start.
      const opens = c === "*" || i === 0 || /\W/.test(text[i - 1] ?? "");
      if (end > i + 1 && opens && text[end - 1] !== " ") {
        flush();
        out.push({ t: "em", children: parseInline(text.slice(i + 1, end)) });
        i = end + 1;
        continue;
      }
    }
    if (c === "[") {
      const close = text.indexOf("](", i + 1);
      const end = close < 0 ? -1 : text.indexOf(")", close + 2);
      const href = end < 0 ? "" : text.slice(close + 2, end).trim();
      if (close > i && end > close && SAFE_HREF.test(href) && !/\s/.test(href)) {
        flush();
        out.push({ t: "link", href, children: parseInline(text.slice(i + 1, close)) });
        i = end + 1;
        continue;
      }
    }
    plain += c;
    i++;
  }
  flush();
  return out;
}

/** DOM nodes for `source`'s markdown (textContent only). */
export function renderMarkdown(doc: Document, source: string): Node[] {
  const element = (tag: string, children: Node[]) => {
    const node = doc.createElement(tag);
    node.append(...children);
    return node;
  };
  const inline = (spans: Inline[]): Node[] =>
    spans.map((s): Node => {
      if (s.t === "text") return doc.createTextNode(s.text);
      if (s.t === "code") return Object.assign(doc.createElement("code"), { textContent: s.text });
      if (s.t === "link")
        return Object.assign(element("a", inline(s.children)), {
          href: s.href,
          target: "_blank",
          rel: "noopener noreferrer",
        });
      return element(s.t, inline(s.children));
    });
  return parseMarkdown(source).map((b): Node => {
    if (b.t === "p") return element("p", inline(b.children));
    if (b.t === "quote") return element("blockquote", inline(b.children));
    if (b.t === "h") return element(`h${Math.min(6, b.level + 3)}`, inline(b.children));
    if (b.t === "pre") {
      const code = Object.assign(doc.createElement("code"), { textContent: b.text });
      if (b.lang) code.dataset.lang = b.lang;
      return element("pre", [code]);
    }
    return element(
      b.t,
      b.items.map((item) => element("li", inline(item))),
    );
  });
}
