import { SSEStreamingApi } from "hono/streaming";
import { describe, expect, it } from "vitest";
import { sseEvent } from "./reply-format.ts";

/** What Hono's own `writeSSE` puts on the wire for one event. */
async function honoFrame(event: string, data: string): Promise<string> {
  const { readable, writable } = new TransformStream<Uint8Array, Uint8Array>();
  const sse = new SSEStreamingApi(writable, readable);
  const read = new Response(sse.responseReadable).text();
  await sse.writeSSE({ event, data });
  await sse.close();
  return read;
}

describe("the relay's SSE events", () => {
  it("are framed as Hono's writeSSE frames them, line breaks in the data included", async () => {
    for (const data of [
      { type: "delta", text: "one " },
      { type: "delta", text: "two\nlines\r\n" },
      { type: "result", result: { id: "r-1", outcome: "succeeded", output: "ok" } },
    ])
      expect(sseEvent(data.type, data)).toBe(await honoFrame(data.type, JSON.stringify(data)));
  });
});
