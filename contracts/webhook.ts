import { z } from "zod";
import { API_VERSION, ObjectMeta } from "./resources.ts";

/**
 * Webhook (issue 40): a receiver told of HarnessSession lifecycle events in its own namespace,
 * signed the Standard Webhooks way (standardwebhooks.com: `webhook-id`, `webhook-timestamp`,
 * `webhook-signature` headers; the secret `whsec_<base64>`). `spec.secret` is write-only: no
 * answer carries it, except the create answer when the server generated it (shown once, as API
 * tokens are).
 */
export const WEBHOOK_KIND = "Webhook";

/**
 * The events a Webhook may ask for, each a session transition (its `reason` says why):
 * `created` (the session was written), `ready` (Ready: started, resumed, woken), `paused`
 * (frozen, the paused tier), `stopped` (stopped: desiredState stopped, IdleTimeout, a restore),
 * `evicted` (stopped to keep a runner's paused sessions within its memory budget: reason Evicted),
 * `failed` (phase Failed), `restarted` (restarted after an unexpected exit), `expired` (its
 * spec.ttl or spec.expiresAt was reached; it is being deleted), `deleted` (gone: reason Deleting,
 * or Expired after an expiry), `snapshot.ready` (a SessionSnapshot of it was taken).
 */
export const WebhookEvent = z.enum([
  "created",
  "ready",
  "paused",
  "stopped",
  "evicted",
  "failed",
  "restarted",
  "expired",
  "deleted",
  "snapshot.ready",
]);
export type WebhookEvent = z.infer<typeof WebhookEvent>;

/**
 * Webhooks one namespace may have at most: each session transition is fanned out to each of them,
 * so their number bounds what one transition costs. One more is RESOURCE_EXHAUSTED (429).
 */
export const WEBHOOKS_PER_NAMESPACE_MAX = 32;

/** Standard Webhooks' symmetric secrets: `whsec_` and the base64 of 24 to 64 random bytes. */
export const WebhookSecret = z.string().refine(
  (text) => {
    const match = /^whsec_([A-Za-z0-9+/]+={0,2})$/.exec(text);
    if (!match?.[1] || match[1].length % 4 !== 0) return false;
    const bytes = Buffer.from(match[1], "base64").length;
    return bytes >= 24 && bytes <= 64;
  },
  { message: "must be whsec_ followed by the base64 of 24 to 64 bytes (the Standard Webhooks form)" },
);

export const WebhookSpec = z.strictObject({
  /** Where deliveries are POSTed: http:// or https://. Its resolved addresses pass the webhook egress guard. */
  url: z.url({ protocol: /^https?$/, error: "must be an http:// or https:// URL" }).max(2048),
  /** The events delivered, at least one, each once. */
  events: z
    .array(WebhookEvent)
    .min(1)
    .max(WebhookEvent.options.length)
    .refine((events) => new Set(events).size === events.length, { message: "events must be unique" }),
  /** Write-only. Absent on create: one is generated and shown in the create answer only; on replace: kept. */
  secret: WebhookSecret.optional(),
});
export type WebhookSpec = z.infer<typeof WebhookSpec>;

export const Webhook = z.strictObject({
  apiVersion: z.literal(API_VERSION),
  kind: z.literal(WEBHOOK_KIND),
  metadata: ObjectMeta,
  spec: WebhookSpec,
});
export type Webhook = z.infer<typeof Webhook>;
export type WebhookInput = z.input<typeof Webhook>;

/** What is stored: the secret always set (generated when the create did not give one). */
export type StoredWebhook = Webhook & { spec: WebhookSpec & { secret: string } };

/** The session a delivery is about. */
export const WebhookSession = z.object({ namespace: z.string(), name: z.string(), uid: z.string() });
export type WebhookSession = z.infer<typeof WebhookSession>;

/**
 * A delivery's JSON body (Standard Webhooks' `{type, timestamp, data}`): `type` is the event
 * (`ready`, `snapshot.ready` …), `timestamp` when it happened, `data` the session, its phase and the
 * `reason` (a stable HarnessReasons string) and `message` of the transition.
 */
export const WebhookPayload = z.object({
  type: WebhookEvent,
  timestamp: z.string(),
  data: z.object({
    session: WebhookSession,
    phase: z.string().optional(),
    reason: z.string(),
    message: z.string(),
    /** `snapshot.ready`: the SessionSnapshot's name. */
    snapshot: z.string().optional(),
  }),
});
export type WebhookPayload = z.infer<typeof WebhookPayload>;

/** One attempt to deliver one message, as `GET …/webhooks/{name}/deliveries` lists it. */
export const WebhookDelivery = z.object({
  /** The message's `webhook-id` (the same for every attempt of one message: receivers dedupe on it). */
  id: z.string(),
  type: WebhookEvent,
  session: WebhookSession,
  /** 1 for the first attempt. */
  attempt: z.number().int().min(1),
  /** When the attempt started (ISO 8601). */
  time: z.string(),
  durationMs: z.number().nonnegative(),
  /** The receiver's HTTP status, when it answered. */
  statusCode: z.number().int().optional(),
  /** Why the attempt failed without an answer (refused address, timeout, connection error, queue full). */
  error: z.string().optional(),
  /** succeeded (2xx); retrying (another attempt follows); failed (the last attempt, or dropped). */
  outcome: z.enum(["succeeded", "retrying", "failed"]),
  /** When the next attempt is due (outcome retrying). */
  nextAttemptAt: z.string().optional(),
});
export type WebhookDelivery = z.infer<typeof WebhookDelivery>;

export const WebhookDeliveryList = z.object({
  apiVersion: z.literal(API_VERSION),
  kind: z.literal("WebhookDeliveryList"),
  /** Newest first. */
  items: z.array(WebhookDelivery),
});
export type WebhookDeliveryList = z.infer<typeof WebhookDeliveryList>;

/** A Webhook as the API answers it: no secret (write-only), except a generated one in its create answer. */
export function webhookView(webhook: StoredWebhook, showSecret = false): Webhook {
  const { secret, ...spec } = webhook.spec;
  return { ...webhook, spec: showSecret ? { ...spec, secret } : spec };
}
