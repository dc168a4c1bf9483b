import { Webhook as Verifier } from "standardwebhooks";
import { describe, expect, it } from "vitest";
import type { WebhookPayload } from "../../contracts/webhook.ts";
import { silentLogger } from "../observability/log.ts";
import { type DeliveryTarget, retryDelayMs, WebhookDispatcher } from "./webhook-dispatcher.ts";
import type { AttemptResult } from "./webhook-sender.ts";
import { generateWebhookSecret } from "./webhooks.ts";

type Sent = { url: string; headers: Record<string, string>; body: string };

const target = (secret = generateWebhookSecret(), uid = "default/hook@1"): DeliveryTarget => ({
  uid,
  namespace: "default",
  name: "hook",
  url: "http://receiver.test/hook",
  secret,
});

const payload = (type: WebhookPayload["type"], session = "s1", reason = "SessionReady"): WebhookPayload => ({
  type,
  timestamp: new Date().toISOString(),
  data: { session: { namespace: "default", name: session, uid: `uid-${session}` }, reason, message: type },
});

/** A fake clock: sleeps return at once and advance `now`, recording each wait. */
function fakeClock() {
  let now = Date.now();
  const waits: number[] = [];
  return {
    waits,
    now: () => new Date(now),
    sleep: async (ms: number) => {
      waits.push(ms);
      now += ms;
    },
  };
}

describe("webhook dispatcher", () => {
  it("signs every delivery so the Standard Webhooks library verifies it, with the secret and nothing else", async () => {
    const secret = generateWebhookSecret();
    const sent: Sent[] = [];
    const d = new WebhookDispatcher({
      log: silentLogger,
      send: async (url, headers, body) => {
        sent.push({ url, headers, body });
        return { ok: true, statusCode: 204 };
      },
    });
    d.enqueue(target(secret), payload("ready"));
    await d.idle();
    expect(sent).toHaveLength(1);
    const [delivery] = sent as [Sent];
    expect(delivery.headers["webhook-id"]).toMatch(/^msg_[0-9a-f]{32}$/);
    expect(new Verifier(secret).verify(delivery.body, delivery.headers)).toMatchObject({
      type: "ready",
      data: { session: { name: "s1" }, reason: "SessionReady" },
    });
    expect(() => new Verifier(generateWebhookSecret()).verify(delivery.body, delivery.headers)).toThrow();
    expect(() =>
      new Verifier(secret).verify(delivery.body.replace("SessionReady", "Stopped"), delivery.headers),
    ).toThrow();
    expect(d.deliveries("default/hook@1")).toMatchObject([
      { attempt: 1, statusCode: 204, outcome: "succeeded", type: "ready" },
    ]);
  });

  it("retries a failing receiver with exponential back-off, the same webhook-id each time, up to attemptsMax", async () => {
    const clock = fakeClock();
    const ids: string[] = [];
    const answers: AttemptResult[] = [
      { ok: false, statusCode: 500 },
      { ok: false, error: "ECONNREFUSED: connect refused" },
      { ok: false, statusCode: 503 },
      { ok: true, statusCode: 200 },
    ];
    const d = new WebhookDispatcher({
      log: silentLogger,
      now: clock.now,
      sleep: clock.sleep,
      retryBaseMs: 1_000,
      retryMaxMs: 3_000,
      send: async (_url, headers) => {
        ids.push(headers["webhook-id"] as string);
        return answers.shift() ?? { ok: true, statusCode: 200 };
      },
    });
    d.enqueue(target(), payload("stopped"));
    await d.idle();
    expect(clock.waits).toEqual([1_000, 2_000, 3_000]);
    expect(new Set(ids).size).toBe(1);
    expect(d.deliveries("default/hook@1").map((x) => [x.attempt, x.statusCode, x.error, x.outcome])).toEqual([
      [4, 200, undefined, "succeeded"],
      [3, 503, undefined, "retrying"],
      [2, undefined, "ECONNREFUSED: connect refused", "retrying"],
      [1, 500, undefined, "retrying"],
    ]);
  });

  it("gives up after attemptsMax attempts and records the last as failed", async () => {
    const clock = fakeClock();
    let calls = 0;
    const d = new WebhookDispatcher({
      log: silentLogger,
      now: clock.now,
      sleep: clock.sleep,
      attemptsMax: 3,
      send: async () => {
        calls++;
        return { ok: false, statusCode: 500 };
      },
    });
    d.enqueue(target(), payload("failed"));
    await d.idle();
    expect(calls).toBe(3);
    expect(d.deliveries("default/hook@1")[0]).toMatchObject({ attempt: 3, outcome: "failed" });
    expect(d.queued).toBe(0);
  });

  it("keeps a session's events in order: a later one waits until the earlier one is delivered", async () => {
    const clock = fakeClock();
    const order: string[] = [];
    let failFirst = 2;
    const d = new WebhookDispatcher({
      log: silentLogger,
      now: clock.now,
      sleep: clock.sleep,
      send: async (_url, _headers, body) => {
        const p = JSON.parse(body) as WebhookPayload;
        const label = `${p.data.session.name}:${p.type}`;
        if (label === "s1:created" && failFirst-- > 0) {
          order.push(`${label} 500`);
          return { ok: false, statusCode: 500 };
        }
        order.push(label);
        return { ok: true, statusCode: 200 };
      },
    });
    d.enqueue(target(), payload("created", "s1"));
    d.enqueue(target(), payload("ready", "s1"));
    d.enqueue(target(), payload("stopped", "s1"));
    await d.idle();
    expect(order).toEqual(["s1:created 500", "s1:created 500", "s1:created", "s1:ready", "s1:stopped"]);
  });

  it("a slow receiver of one session does not hold another session's events", async () => {
    let release: () => void = () => undefined;
    const held = new Promise<void>((resolve) => {
      release = resolve;
    });
    const delivered: string[] = [];
    const d = new WebhookDispatcher({
      log: silentLogger,
      send: async (_url, _headers, body) => {
        const p = JSON.parse(body) as WebhookPayload;
        if (p.data.session.name === "slow") await held;
        delivered.push(p.data.session.name);
        return { ok: true, statusCode: 200 };
      },
    });
    d.enqueue(target(), payload("ready", "slow"));
    d.enqueue(target(), payload("ready", "quick"));
    await new Promise((resolve) => setImmediate(resolve));
    expect(delivered).toEqual(["quick"]);
    release();
    await d.idle();
    expect(delivered).toEqual(["quick", "slow"]);
  });

  it("enqueue returns at once; past queueMax a message is dropped and recorded as failed", async () => {
    const d = new WebhookDispatcher({
      log: silentLogger,
      queueMax: 2,
      send: () => new Promise<AttemptResult>(() => undefined), // a receiver that never answers
    });
    expect(d.enqueue(target(), payload("created", "a"))).toBe(true);
    expect(d.enqueue(target(), payload("created", "b"))).toBe(true);
    expect(d.enqueue(target(), payload("created", "c"))).toBe(false);
    expect(d.queued).toBe(2);
    expect(d.deliveries("default/hook@1")).toMatchObject([
      { session: { name: "c" }, outcome: "failed", error: expect.stringContaining("queue is full") },
    ]);
  });

  it("keeps a bounded history, newest first, and forgets a deleted Webhook's", async () => {
    const d = new WebhookDispatcher({
      log: silentLogger,
      historyMax: 3,
      send: async () => ({ ok: true, statusCode: 200 }),
    });
    for (const session of ["a", "b", "c", "d", "e"]) d.enqueue(target(), payload("created", session));
    await d.idle();
    expect(d.deliveries("default/hook@1").map((x) => x.session.name)).toHaveLength(3);
    d.forget("default/hook@1");
    expect(d.deliveries("default/hook@1")).toEqual([]);
  });

  it("back-off doubles from the base and is capped", () => {
    expect([1, 2, 3, 4, 5, 6, 7, 8].map((a) => retryDelayMs(a, 1_000, 60_000))).toEqual([
      1_000, 2_000, 4_000, 8_000, 16_000, 32_000, 60_000, 60_000,
    ]);
  });
});
