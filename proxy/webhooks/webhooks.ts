import { randomBytes } from "node:crypto";
import { CodedError } from "../../contracts/errors.ts";
import { API_VERSION } from "../../contracts/resources.ts";
import {
  type StoredWebhook,
  WEBHOOK_KIND,
  WEBHOOKS_PER_NAMESPACE_MAX,
  Webhook,
  type WebhookDeliveryList,
  type WebhookPayload,
  webhookView,
} from "../../contracts/webhook.ts";
import { alreadyExists } from "../lifecycle/already-exists.ts";
import { listQuery, pageOf } from "../lifecycle/pagination.ts";
import { parseInput, withPathMetadata } from "../lifecycle/request-body.ts";
import type { Logger } from "../observability/log.ts";
import type { Store } from "../store/store.ts";
import type { SessionTransition } from "./session-transitions.ts";
import type { DeliveryTarget, WebhookDispatcher } from "./webhook-dispatcher.ts";
import type { WebhookEgress } from "./webhook-egress.ts";

/** A new secret in the Standard Webhooks form: `whsec_` + base64 of 32 random bytes. */
export function generateWebhookSecret(): string {
  return `whsec_${randomBytes(32).toString("base64")}`;
}

/** Which incarnation of a Webhook a message belongs to (one deleted and re-created is another). */
export function webhookUid(webhook: StoredWebhook): string {
  return `${webhook.metadata.namespace}/${webhook.metadata.name}@${webhook.metadata.creationTimestamp ?? ""}`;
}

/**
 * Webhooks (issue 40): the resources (kept in the store's resources table, kind Webhook, secret
 * in the body and never answered) and the fan-out of session transitions to them. A receiver's
 * URL is checked by the webhook egress guard when written (its resolved addresses) and again at
 * every attempt (webhook-sender.ts).
 */
export class Webhooks {
  readonly #store: Store;
  readonly #egress: WebhookEgress;
  readonly #dispatcher: WebhookDispatcher;
  readonly #log: Logger;
  #fanOuts: Promise<void> = Promise.resolve();

  constructor(options: { store: Store; egress: WebhookEgress; dispatcher: WebhookDispatcher; log: Logger }) {
    this.#store = options.store;
    this.#egress = options.egress;
    this.#dispatcher = options.dispatcher;
    this.#log = options.log;
  }

  /**
   * PUT: create (201; a generated secret shown in this answer only) or replace (200; no secret
   * given keeps the stored one). A refused receiver, an unknown event or a malformed secret is
   * INVALID_ARGUMENT and nothing is stored.
   */
  async put(
    namespace: string,
    name: string,
    body: unknown,
    ifAbsent: boolean,
  ): Promise<{ webhook: unknown; created: boolean }> {
    const written = parseInput(Webhook, withPathMetadata(body, namespace, name), WEBHOOK_KIND);
    if (written.metadata.name !== name || written.metadata.namespace !== namespace)
      throw new CodedError(
        "INVALID_ARGUMENT",
        `invalid ${WEBHOOK_KIND}: metadata.name and metadata.namespace must match the path (${namespace}/${name})`,
        { field_violations: [{ field: "metadata", description: "must match the path" }] },
      );
    const host = new URL(written.spec.url).hostname;
    const checked = await this.#egress.resolve(host);
    if (!checked.ok)
      throw new CodedError(
        "INVALID_ARGUMENT",
        `invalid ${WEBHOOK_KIND} ${namespace}/${name}: spec.url: ${checked.why}; the server does not post there (an operator may allow it with AGENT_SESSIONS_WEBHOOK_EGRESS_ALLOW)`,
        {
          reason: "EgressForbidden",
          field_violations: [{ field: "spec.url", description: checked.why }],
        },
      );
    const existing = await this.#store.getResource(WEBHOOK_KIND, namespace, name);
    if (existing && ifAbsent) throw alreadyExists(WEBHOOK_KIND, namespace, name);
    if (!existing) {
      const count = (await this.#store.listResources(WEBHOOK_KIND, namespace)).length;
      if (count >= WEBHOOKS_PER_NAMESPACE_MAX)
        throw new CodedError(
          "RESOURCE_EXHAUSTED",
          `namespace ${namespace} has ${count} Webhooks, the most it may have (${WEBHOOKS_PER_NAMESPACE_MAX}); delete one first`,
          { limit: WEBHOOKS_PER_NAMESPACE_MAX },
        );
    }
    const generated = written.spec.secret === undefined && !existing;
    const secret = written.spec.secret ?? existing?.spec.secret ?? generateWebhookSecret();
    const { creationTimestamp: _ignored, ...metadata } = written.metadata;
    const { resource, created } = await this.#store.putResource<StoredWebhook>(
      { ...written, metadata, spec: { ...written.spec, secret } },
      { ifAbsent },
    );
    if (ifAbsent && !created) throw alreadyExists(WEBHOOK_KIND, namespace, name);
    return { webhook: webhookView(resource, generated && created), created };
  }

  async get(namespace: string, name: string): Promise<unknown> {
    return webhookView(await this.#found(namespace, name));
  }

  async list(
    namespace: string,
    query: { limit?: string | undefined; continue?: string | undefined },
  ): Promise<unknown> {
    const list = `webhooks/${namespace}`;
    const page = listQuery(list, query);
    const rows = await this.#store.listResources(WEBHOOK_KIND, namespace, page);
    const { items, next } = pageOf(list, rows, page, (w) => [w.metadata.name]);
    return {
      apiVersion: API_VERSION,
      kind: `${WEBHOOK_KIND}List`,
      metadata: next === undefined ? {} : { continue: next },
      items: items.map((w) => webhookView(w)),
    };
  }

  /** DELETE: gone, with what waited for it and its delivery history. */
  async delete(namespace: string, name: string): Promise<unknown> {
    const deleted = await this.#store.deleteResource(WEBHOOK_KIND, namespace, name);
    if (!deleted) throw new CodedError("NOT_FOUND", `${WEBHOOK_KIND} ${namespace}/${name} not found`);
    this.#dispatcher.forget(webhookUid(deleted));
    return webhookView(deleted);
  }

  /** `GET …/webhooks/{name}/deliveries`: its recent attempts, newest first. */
  async deliveries(namespace: string, name: string): Promise<WebhookDeliveryList> {
    const webhook = await this.#found(namespace, name);
    return {
      apiVersion: API_VERSION,
      kind: "WebhookDeliveryList",
      items: this.#dispatcher.deliveries(webhookUid(webhook)),
    };
  }

  /**
   * Queue `transition` for every Webhook of its namespace that asked for its event; returns at
   * once. The store read and the queueing happen in the background, one transition after the
   * other (so a session's events are queued in the order they happened); a failure is logged.
   */
  notify(transition: SessionTransition): void {
    this.#fanOuts = this.#fanOuts.then(() =>
      this.#fanOut(transition).catch((error: unknown) =>
        this.#log("error", "webhook fan-out failed", {
          namespace: transition.session.namespace,
          name: transition.session.name,
          event: transition.event,
          error: String(error),
        }),
      ),
    );
  }

  /** Resolves once every transition told so far is queued (tests). */
  settled(): Promise<void> {
    return this.#fanOuts;
  }

  async #fanOut(transition: SessionTransition): Promise<void> {
    const hooks = await this.#store.listResources(WEBHOOK_KIND, transition.session.namespace);
    const payload: WebhookPayload = {
      type: transition.event,
      timestamp: transition.time,
      data: {
        session: transition.session,
        ...(transition.phase !== undefined ? { phase: transition.phase } : {}),
        reason: transition.reason,
        message: transition.message,
        ...(transition.snapshot !== undefined ? { snapshot: transition.snapshot } : {}),
      },
    };
    for (const hook of hooks) {
      if (!hook.spec.events.includes(transition.event)) continue;
      const target: DeliveryTarget = {
        uid: webhookUid(hook),
        namespace: hook.metadata.namespace,
        name: hook.metadata.name,
        url: hook.spec.url,
        secret: hook.spec.secret,
      };
      this.#dispatcher.enqueue(target, payload);
    }
  }

  async #found(namespace: string, name: string): Promise<StoredWebhook> {
    const webhook = await this.#store.getResource(WEBHOOK_KIND, namespace, name);
    if (!webhook) throw new CodedError("NOT_FOUND", `${WEBHOOK_KIND} ${namespace}/${name} not found`);
    return webhook;
  }
}
