import { readSse } from "../../client/sse.ts";

/** One server-sent event as received. */
export type SseEvent = { id?: string; event?: string; data: string };

/**
 * A minimal SSE reader over fetch (tests): collects events as they arrive, parsed by the one SSE
 * parser (client/sse.ts `readSse`).
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
    for await (const message of readSse(body)) {
      // The default event type stays unset, as tests filter frames by it.
      const event: SseEvent = { data: message.data };
      if (message.id !== undefined) event.id = message.id;
      if (message.event !== "message") event.event = message.event;
      this.events.push(event);
      for (const wake of this.#waiters.splice(0)) wake();
    }
  }
}
