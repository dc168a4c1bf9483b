/** One server-sent event as received. */
export type SseEvent = { id?: string; event?: string; data: string };

/**
 * A minimal SSE reader over fetch (tests): parses events as they arrive (WHATWG HTML
 * §9.2 event stream interpretation, the parts the server uses).
 */
export class SseClient {
  readonly events: SseEvent[] = [];
  readonly #abort = new AbortController();
  #waiters: (() => void)[] = [];
  status = 0;
  done = false;

  static async open(url: string, headers: Record<string, string>): Promise<SseClient> {
    const client = new SseClient();
    const response = await fetch(url, { headers, signal: client.#abort.signal });
    client.status = response.status;
    if (!response.ok || !response.body) {
      client.events.push({ event: "http-error", data: await response.text() });
      client.done = true;
      return client;
    }
    client.#pump(response.body).then(
      () => client.#finish(),
      () => client.#finish(),
    );
    return client;
  }

  /** Frames (data of default events) parsed as JSON. */
  frames<T = Record<string, unknown>>(): T[] {
    return this.events.filter((e) => e.event === undefined).map((e) => JSON.parse(e.data) as T);
  }

  async until(predicate: (events: SseEvent[]) => boolean, timeoutMs = 5_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (!predicate(this.events)) {
      if (this.done) throw new Error(`SSE stream ended; got ${JSON.stringify(this.events)}`);
      if (Date.now() > deadline) throw new Error(`SSE: timed out; got ${JSON.stringify(this.events)}`);
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, 25);
        this.#waiters.push(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
  }

  close(): void {
    this.#abort.abort();
  }

  #finish(): void {
    this.done = true;
    for (const wake of this.#waiters.splice(0)) wake();
  }

  async #pump(body: ReadableStream<Uint8Array>): Promise<void> {
    const decoder = new TextDecoder();
    let buffer = "";
    for await (const chunk of body) {
      buffer += decoder.decode(chunk, { stream: true });
      let split = buffer.indexOf("\n\n");
      while (split >= 0) {
        const block = buffer.slice(0, split);
        buffer = buffer.slice(split + 2);
        this.#block(block);
        split = buffer.indexOf("\n\n");
      }
    }
  }

  #block(block: string): void {
    const event: SseEvent = { data: "" };
    const data: string[] = [];
    for (const line of block.split("\n")) {
      if (line.startsWith(":")) continue;
      const colon = line.indexOf(":");
      const field = colon < 0 ? line : line.slice(0, colon);
      const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
      if (field === "data") data.push(value);
      else if (field === "id") event.id = value;
      else if (field === "event") event.event = value;
    }
    if (data.length === 0) return;
    event.data = data.join("\n");
    this.events.push(event);
    for (const wake of this.#waiters.splice(0)) wake();
  }
}
