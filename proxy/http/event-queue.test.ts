import { Hono } from "hono";
import { afterEach, describe, expect, it, vi } from "vitest";
import { readSse, type SseMessage } from "../../client/sse.ts";
import { COMPASS_PROTOCOL } from "../../contracts/compass.ts";
import { toErrorResponse } from "./error-response.ts";
import { EventBus } from "../lifecycle/event-bus.ts";
import { eventRoutes } from "./event-stream.ts";
import { SqliteStore } from "../store/sqlite-store.ts";
import type { StoredFrame } from "../store/store.ts";

const KIB = 1024;
let store: SqliteStore | undefined;
afterEach(async () => {
  await store?.close();
  store = undefined;
});

function frame(id: number, bytes = 10 * KIB): StoredFrame {
  return {
    id,
    frame: {
      protocol: COMPASS_PROTOCOL,
      seq: id,
      session_id: "s1",
      type: "delta",
      ts: new Date(0).toISOString(),
      payload: { text: "x".repeat(bytes) },
    },
  };
}

function setUp(options: { maxQueuedBytes: number; dropGraceMs?: number; maxSubscribers?: number }) {
  store = new SqliteStore(":memory:");
  const bus = new EventBus();
  const app = new Hono().route("/", eventRoutes({ store, bus, keepAliveMs: 60_000, ...options }));
  app.onError((error, c) => {
    const { status, body } = toErrorResponse(error);
    return c.json(body, status as 429);
  });
  // `app.request` hands back the body unread: a follower that reads nothing, with no socket buffer between.
  const open = async (headers: Record<string, string> = {}) => {
    const response = await app.request("/", { headers });
    const body = response.body;
    if (!body) throw new Error("no body");
    return { status: response.status, reader: body.getReader() };
  };
  return { bus, open };
}

/** Every server-sent event of `head` and what the stream sends after it, until it ends (client/sse.ts). */
async function readAll(head: string, reader: ReadableStreamDefaultReader<Uint8Array>): Promise<SseMessage[]> {
  const decoder = new TextDecoder();
  let text = head;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    text += decoder.decode(value, { stream: true });
  }
  const body = new Response(text).body;
  if (!body) throw new Error("no body");
  const events: SseMessage[] = [];
  for await (const event of readSse(body)) events.push(event);
  return events;
}

describe("/v1/events queues are bounded in bytes", () => {
  it("drops a follower that falls more than the bound behind: the bus lets go of it at once, and it is told to reconnect with Last-Event-ID", async () => {
    const { bus, open } = setUp({ maxQueuedBytes: 64 * KIB });
    const slow = await open();
    expect(slow.status).toBe(200);
    bus.publish(frame(1));
    const decoder = new TextDecoder();
    let head = "";
    while (!head.includes("id: 1\n"))
      head += decoder.decode((await slow.reader.read()).value, { stream: true });
    // Then 30 frames of 10 KiB (300 KiB) reach it while it reads nothing: far under the
    // frame-count bound, far over the byte bound.
    for (let id = 2; id <= 31; id++) bus.publish(frame(id));
    expect(bus.size).toBe(0);

    const events = await readAll(head, slow.reader);
    const frames = events.filter((e) => e.event === "message");
    const last = events.at(-1);
    expect(last?.event).toBe("reconnect");
    const told = JSON.parse(last?.data ?? "{}");
    expect(told).toMatchObject({ code: "RESOURCE_EXHAUSTED", last_event_id: Number(frames.at(-1)?.id) });
    expect(told.message).toMatch(/Last-Event-ID/);
    expect(told.message).toMatch(/AGENT_SESSIONS_EVENT_QUEUE_MAX_BYTES/);
    // What it got is a prefix without holes, and less than the frames published plus the bound.
    expect(frames.map((e) => Number(e.id))).toEqual(frames.map((_, i) => i + 1));
    expect(frames.length).toBeLessThan(31);
    expect(frames.reduce((n, e) => n + e.data.length, 0)).toBeLessThanOrEqual(64 * KIB + 12 * KIB);
  });

  it("closes a dropped follower that takes nothing more, freeing its place under the subscriber cap", async () => {
    const { bus, open } = setUp({ maxQueuedBytes: 64 * KIB, dropGraceMs: 20, maxSubscribers: 1 });
    const stuck = await open();
    expect((await open()).status).toBe(429);
    for (let id = 1; id <= 30; id++) bus.publish(frame(id));
    expect(bus.size).toBe(0);
    await vi.waitFor(
      async () => {
        const next = await open();
        expect(next.status).toBe(200);
        await next.reader.cancel();
      },
      { timeout: 5_000, interval: 20 },
    );
    await stuck.reader.cancel();
  });

  it("never drops a follower that keeps up, however much passes through it", async () => {
    const { bus, open } = setUp({ maxQueuedBytes: 64 * KIB });
    const follower = await open();
    const decoder = new TextDecoder();
    let seen = "";
    for (let id = 1; id <= 100; id++) {
      bus.publish(frame(id));
      while (!seen.includes(`id: ${id}\n`)) {
        const { value, done } = await follower.reader.read();
        expect(done).toBe(false);
        seen += decoder.decode(value, { stream: true });
      }
    }
    // 1000 KiB went through a 64 KiB bound.
    expect(bus.size).toBe(1);
    expect(seen).not.toContain("event: reconnect");
    await follower.reader.cancel();
  });
});

describe("/v1/events writes each burst's bytes once for every follower", () => {
  /** What a follower has read, until it holds the event `id`. */
  async function readUntil(reader: ReadableStreamDefaultReader<Uint8Array>, id: number, head = "") {
    const decoder = new TextDecoder();
    let text = head;
    while (!text.includes(`\nid: ${id}\n\n`))
      text += decoder.decode((await reader.read()).value, { stream: true });
    return text;
  }
  const sse = (frames: StoredFrame[]) =>
    frames.map((f) => `data: ${JSON.stringify(f.frame)}\nid: ${f.id}\n\n`).join("");

  it("gives every follower of a burst exactly the SSE of each frame, byte for byte, also one resuming past part of it", async () => {
    const { bus, open } = setUp({ maxQueuedBytes: 1024 * KIB });
    const followers = await Promise.all([open(), open(), open()]);
    // Resuming after 2: the first two frames of the burst are not for it.
    const resuming = await open({ "Last-Event-ID": "2" });
    const burst = Array.from({ length: 5 }, (_, i) => frame(i + 1, 100 + i));
    for (const f of burst) bus.publish(f);
    for (const f of followers) expect(await readUntil(f.reader, 5)).toBe(sse(burst));
    expect(await readUntil(resuming.reader, 5)).toBe(sse(burst.slice(2)));

    // The next burst, in a later turn of the event loop, again as its own bytes.
    const next = Array.from({ length: 3 }, (_, i) => frame(i + 6, 50));
    for (const f of next) bus.publish(f);
    for (const f of [...followers, resuming]) expect(await readUntil(f.reader, 8)).toBe(sse(next));
    for (const f of [...followers, resuming]) await f.reader.cancel();
  });
});
