/** One server-sent event (WHATWG HTML §9.2.6): `event` defaults to "message". */
export type SseMessage = { id: string | undefined; event: string; data: string };

/**
 * The events of an SSE body, as they arrive. Comment lines (keep-alives) are skipped; several
 * `data:` lines of one event are joined with "\n"; an event without data is not dispatched.
 */
export async function* readSse(body: ReadableStream<Uint8Array>): AsyncGenerator<SseMessage> {
  const decoder = new TextDecoder();
  let buffer = "";
  const reader = body.getReader();
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return;
      buffer += decoder.decode(value, { stream: true }).replace(/\r\n?/g, "\n");
      let end = buffer.indexOf("\n\n");
      while (end >= 0) {
        const message = parseBlock(buffer.slice(0, end));
        buffer = buffer.slice(end + 2);
        if (message) yield message;
        end = buffer.indexOf("\n\n");
      }
    }
  } finally {
    // Leaving the loop early (break, throw, abort) releases the connection.
    await reader.cancel().catch(() => undefined);
  }
}

function parseBlock(block: string): SseMessage | undefined {
  let id: string | undefined;
  let event = "message";
  const data: string[] = [];
  for (const line of block.split("\n")) {
    if (line === "" || line.startsWith(":")) continue;
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "id") id = value;
    else if (field === "event") event = value;
    else if (field === "data") data.push(value);
  }
  return data.length ? { id, event, data: data.join("\n") } : undefined;
}
