import { randomBytes } from "node:crypto";
import { setTimeout as sleepFor } from "node:timers/promises";
import { Webhook as Signer } from "standardwebhooks";
import type { WebhookDelivery, WebhookPayload } from "../../contracts/webhook.ts";
import type { Logger } from "../observability/log.ts";
import type { SendWebhook } from "./webhook-sender.ts";

/** A Webhook as the dispatcher needs it (captured when a message is queued). */
export type DeliveryTarget = { uid: string; namespace: string; name: string; url: string; secret: string };

export type WebhookDispatcherOptions = {
  send: SendWebhook;
  log: Logger;
  /** Attempts of one message at most (the first included). @default 8 */
  attemptsMax?: number;
  /** The wait after the first failed attempt; doubled after each further one. @default 1000 */
  retryBaseMs?: number;
  /** The longest wait between two attempts. @default 60000 */
  retryMaxMs?: number;
  /** Messages waiting (all receivers) at most; one more is dropped and recorded as failed. @default 10000 */
  queueMax?: number;
  /** Attempts remembered per Webhook (`…/deliveries`), newest first. @default 100 */
  historyMax?: number;
  /** @default () => new Date() */
  now?: () => Date;
  /** Waits `ms` (the back-off); rejects when `signal` aborts. @default node:timers/promises setTimeout */
  sleep?: (ms: number, signal: AbortSignal) => Promise<unknown>;
};

type Message = { id: string; target: DeliveryTarget; payload: WebhookPayload };

/** The wait before attempt `attempt + 1` after attempt `attempt` failed: base·2^(attempt−1), capped. Pure. */
export function retryDelayMs(attempt: number, baseMs: number, maxMs: number): number {
  return Math.min(maxMs, baseMs * 2 ** Math.max(0, attempt - 1));
}

/**
 * Delivers webhook messages off the controllers' path: `enqueue` returns at once, whatever the
 * receiver does. Per Webhook and session, one lane: messages in the order they were queued, a
 * later one waiting until the earlier one succeeded or gave up (in order per session; a slow
 * receiver holds only its own lanes). Each message is retried with exponential back-off up to
 * `attemptsMax` attempts (at least once while this process lives: the queue is in memory, and a
 * server restart loses what was waiting). Every attempt is recorded (`deliveries`, bounded).
 */
export class WebhookDispatcher {
  readonly #o: Required<WebhookDispatcherOptions>;
  readonly #lanes = new Map<string, Message[]>();
  readonly #history = new Map<string, WebhookDelivery[]>();
  readonly #running = new Set<Promise<void>>();
  readonly #abort = new AbortController();
  /** Uids of deleted Webhooks (a re-created one has a new uid). */
  readonly #forgotten = new Set<string>();
  #queued = 0;

  constructor(options: WebhookDispatcherOptions) {
    this.#o = {
      attemptsMax: 8,
      retryBaseMs: 1_000,
      retryMaxMs: 60_000,
      queueMax: 10_000,
      historyMax: 100,
      now: () => new Date(),
      sleep: (ms, signal) => sleepFor(ms, undefined, { signal }),
      ...options,
    };
  }

  /** Queue one message for `target`; returns at once. False when the queue was full (recorded as failed). */
  enqueue(target: DeliveryTarget, payload: WebhookPayload): boolean {
    const message: Message = { id: `msg_${randomBytes(16).toString("hex")}`, target, payload };
    if (this.#abort.signal.aborted) return false;
    if (this.#queued >= this.#o.queueMax) {
      this.#record(message, {
        attempt: 1,
        time: this.#o.now().toISOString(),
        durationMs: 0,
        error: `dropped: ${this.#o.queueMax} messages already waiting (the queue is full)`,
        outcome: "failed",
      });
      this.#o.log("warn", "webhook message dropped: the queue is full", {
        namespace: target.namespace,
        webhook: target.name,
        type: payload.type,
      });
      return false;
    }
    this.#queued++;
    const key = `${target.uid}/${payload.data.session.uid}`;
    const lane = this.#lanes.get(key);
    if (lane) {
      lane.push(message);
      return true;
    }
    this.#lanes.set(key, [message]);
    const run = this.#drain(key).finally(() => this.#running.delete(run));
    this.#running.add(run);
    return true;
  }

  /** Recent attempts for the Webhook with this uid, newest first. */
  deliveries(webhookUid: string): WebhookDelivery[] {
    return [...(this.#history.get(webhookUid) ?? [])];
  }

  /** A deleted Webhook: its waiting messages are dropped and its history forgotten. */
  forget(webhookUid: string): void {
    for (const [key, lane] of this.#lanes)
      if (key.startsWith(`${webhookUid}/`)) {
        this.#queued -= lane.length;
        lane.length = 0;
      }
    this.#history.delete(webhookUid);
    this.#forgotten.add(webhookUid);
  }

  /** Messages waiting or being delivered. */
  get queued(): number {
    return this.#queued;
  }

  /** Resolves once nothing is waiting (tests). */
  async idle(): Promise<void> {
    while (this.#running.size > 0) await Promise.all([...this.#running]);
  }

  /**
   * Stops: no more attempts; what waits is dropped. Does not wait for an attempt in flight (it
   * ends at its own timeout): a slow receiver never holds a server's shutdown.
   */
  close(): void {
    this.#abort.abort();
  }

  async #drain(key: string): Promise<void> {
    const lane = this.#lanes.get(key);
    try {
      while (lane && lane.length > 0 && !this.#abort.signal.aborted) {
        const message = lane[0] as Message;
        await this.#deliver(message);
        if (lane[0] === message) {
          lane.shift();
          this.#queued--;
        }
      }
    } finally {
      this.#lanes.delete(key);
    }
  }

  async #deliver(message: Message): Promise<void> {
    const body = JSON.stringify(message.payload);
    const signer = new Signer(message.target.secret);
    for (let attempt = 1; attempt <= this.#o.attemptsMax; attempt++) {
      // Closed, or the Webhook deleted meanwhile (forget): no more attempts.
      if (this.#abort.signal.aborted || this.#forgotten.has(message.target.uid)) return;
      const started = this.#o.now();
      const t0 = performance.now();
      const headers = {
        "content-type": "application/json",
        "user-agent": "agent-sessions-webhooks",
        "webhook-id": message.id,
        "webhook-timestamp": String(Math.floor(started.getTime() / 1000)),
        "webhook-signature": signer.sign(message.id, started, body),
      };
      const result = await this.#o.send(message.target.url, headers, body);
      const durationMs = Math.round((performance.now() - t0) * 10) / 10;
      const last = attempt === this.#o.attemptsMax;
      const delay = retryDelayMs(attempt, this.#o.retryBaseMs, this.#o.retryMaxMs);
      const outcome = result.ok ? "succeeded" : last ? "failed" : "retrying";
      this.#record(message, {
        attempt,
        time: started.toISOString(),
        durationMs,
        ...(result.statusCode !== undefined ? { statusCode: result.statusCode } : {}),
        ...(!result.ok && result.error !== undefined ? { error: result.error } : {}),
        outcome,
        ...(outcome === "retrying"
          ? { nextAttemptAt: new Date(this.#o.now().getTime() + delay).toISOString() }
          : {}),
      });
      if (result.ok) return;
      if (last) {
        this.#o.log("warn", "webhook delivery gave up", {
          namespace: message.target.namespace,
          webhook: message.target.name,
          type: message.payload.type,
          attempts: attempt,
        });
        return;
      }
      try {
        await this.#o.sleep(delay, this.#abort.signal);
      } catch {
        return; // closed
      }
    }
  }

  #record(message: Message, attempt: Omit<WebhookDelivery, "id" | "type" | "session">): void {
    const uid = message.target.uid;
    if (this.#forgotten.has(uid)) return;
    const list = this.#history.get(uid) ?? [];
    list.unshift({
      id: message.id,
      type: message.payload.type,
      session: message.payload.data.session,
      ...attempt,
    });
    if (list.length > this.#o.historyMax) list.length = this.#o.historyMax;
    this.#history.set(uid, list);
  }
}
