import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { startTestServer, type TestServer } from "../testing/test-server.ts";

let t: TestServer;
afterEach(async () => {
  await t.close();
});

async function session(server: TestServer, requestId = "req-1", workstream = "") {
  const provisioned = await server.rpc("ProvisionAgentWorkspace", {
    agent_ref: "alice",
    workstream,
    client_request_id: requestId,
  });
  const started = await server.rpc("StartAgentSession", { container_name: provisioned.body.container_name });
  return started.body.session_id as string;
}

describe("GET /v1/events", () => {
  beforeEach(async () => {
    t = await startTestServer();
  });

  it("resumes with Last-Event-ID without loss or repeats, across frames sent while away", async () => {
    const runner = await t.runner();
    const id = await session(t);
    const first = await t.events(`?session_id=${id}`, "0");
    for (let i = 0; i < 5; i++) runner.frame(id, { type: "delta", payload: { i } });
    await first.until((e) => e.length >= 7);
    const lastSeen = first.events.at(-1)?.id;
    first.close();

    for (let i = 5; i < 305; i++) runner.frame(id, { type: "delta", payload: { i } });
    const resumed = await t.events(`?session_id=${id}`, lastSeen);
    for (let i = 305; i < 310; i++) runner.frame(id, { type: "delta", payload: { i } });
    await resumed.until((e) => e.length >= 305);

    const seqs = [...first.frames(), ...resumed.frames()].map((f) => f.seq as number);
    expect(seqs).toEqual(Array.from({ length: 312 }, (_, k) => k + 1));
    expect(resumed.events.map((e) => Number(e.id))).toEqual(seqs.slice(7));
  });

  it("uses the global frame id without a session filter, and follows every session", async () => {
    const runner = await t.runner();
    const a = await session(t, "req-a", "a");
    const b = await session(t, "req-b", "b");
    const all = await t.events("", "0");
    await all.until((e) => e.length >= 4);
    runner.frame(b, { type: "log", payload: {} });
    await all.until((e) => e.length >= 5);
    expect(all.events.map((e) => Number(e.id))).toEqual([1, 2, 3, 4, 5]);
    expect(all.frames().map((f) => f.session_id)).toEqual([a, a, b, b, b]);

    const resumed = await t.events("", "3");
    await resumed.until((e) => e.length >= 2);
    expect(resumed.events.map((e) => e.id)).toEqual(["4", "5"]);
  });

  it("starts with the next frame when no cursor is given", async () => {
    const runner = await t.runner();
    const id = await session(t);
    const live = await t.events(`?session_id=${id}`);
    runner.frame(id, { type: "message", payload: { text: "now" } });
    await live.until((e) => e.length >= 1);
    expect(live.frames()).toMatchObject([{ seq: 3, type: "message" }]);
  });

  it("accepts ?last_event_id= for clients that cannot set headers", async () => {
    await t.runner();
    const id = await session(t);
    const client = await t.events(`?session_id=${id}&last_event_id=1`);
    await client.until((e) => e.length >= 1);
    expect(client.frames()).toMatchObject([{ seq: 2, payload: { state: "READY" } }]);
  });

  it("delivers a burst to many followers complete and in order, with and without a session filter", async () => {
    const runner = await t.runner();
    const id = await session(t);
    const followers = await Promise.all(
      Array.from({ length: 20 }, (_, i) => t.events(i % 2 === 0 ? `?session_id=${id}` : "")),
    );
    // Both kinds are subscribed once they see a frame published after they connected.
    runner.frame(id, { type: "log", payload: { warmup: true } });
    for (const f of followers) await f.until((e) => e.length >= 1);
    for (let i = 0; i < 300; i++) runner.frame(id, { type: "delta", payload: { i } });
    for (const f of followers) await f.until((e) => e.length >= 301);
    for (const f of followers) {
      const frames = f.frames();
      expect(frames.map((x) => (x.payload as { i?: number }).i)).toEqual([
        undefined,
        ...Array.from({ length: 300 }, (_, i) => i),
      ]);
      const ids = f.events.map((e) => Number(e.id));
      expect(ids).toEqual([...ids].sort((x, y) => x - y));
      expect(new Set(ids).size).toBe(ids.length);
    }
  });

  it("rejects a bad cursor with 400 and an unknown session with 404", async () => {
    expect((await t.events("?session_id=ses-nope")).status).toBe(404);
    expect((await t.events("", "minus-one")).status).toBe(400);
  });
});

describe("GET /v1/events with a bounded buffer", () => {
  it("says which frames were trimmed before resuming with the rest", async () => {
    t = await startTestServer({ frameBufferSize: 5 });
    const runner = await t.runner();
    const id = await session(t);
    for (let i = 0; i < 10; i++) runner.frame(id, { type: "delta", payload: { i } });
    const probe = await t.events(`?session_id=${id}`, "0");
    await probe.until((e) => e.length >= 6);
    expect(probe.events[0]).toEqual({
      event: "gap",
      // Named like its frames: an RPC session's namespace, no HarnessSession name.
      data: JSON.stringify({ session_id: id, namespace: "default", from_seq: 1, to_seq: 7 }),
    });
    expect(probe.frames().map((f) => f.seq)).toEqual([8, 9, 10, 11, 12]);
  });
});
