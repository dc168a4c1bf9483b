import { readSse } from "../../client/sse.ts";

/** One event of `/v1/events` with its data parsed as JSON (left text when it is not JSON). */
// biome-ignore lint/suspicious/noExplicitAny: event data is whatever the server sent, read by assertions
export type SseEvent = { id: string; event: string; data: any };

/**
 * The events of an SSE response body, parsed by the one SSE parser (client/sse.ts `readSse`,
 * which the CLI and the UI use too), each event's data parsed as JSON where it is JSON.
 */
export async function* sseEvents(
  body: ReadableStream<Uint8Array> | AsyncIterable<Uint8Array>,
): AsyncGenerator<SseEvent> {
  for await (const message of readSse(body as ReadableStream<Uint8Array>)) {
    yield { id: message.id ?? "", event: message.event, data: jsonOrText(message.data) };
  }
}

function jsonOrText(data: string): unknown {
  try {
    return JSON.parse(data);
  } catch {
    return data;
  }
}
