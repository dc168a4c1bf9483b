import { HarnessReasons } from "../../contracts/harness-session.ts";
import type { WebhookEvent } from "../../contracts/webhook.ts";
import { readyOf } from "../harness/harness-status.ts";
import type { HarnessRecord, HarnessStore } from "../store/harness-store.ts";

/** A HarnessSession transition a Webhook may be told of. */
export type SessionTransition = {
  event: WebhookEvent;
  session: { namespace: string; name: string; uid: string };
  phase?: string;
  /** The Ready condition's reason (a stable HarnessReasons string), or the event's own. */
  reason: string;
  message: string;
  /** When it happened (ISO 8601). */
  time: string;
  /** `snapshot.ready`: the SessionSnapshot. */
  snapshot?: string;
};

type Observed = Pick<HarnessRecord, "phase" | "conditions" | "restart_count">;

/**
 * The events one status write makes, from the session as it was and as it is now, in the order
 * they happened. A phase entered says `ready`, `paused`, `stopped` (`evicted` when its reason is
 * Evicted) or `failed`; a restart count going up says `restarted`; the Ready reason turning to
 * Expired says `expired`. Pending and Draining are steps on the way, not events. Pure.
 */
export function transitionEvents(before: Observed, after: Observed): WebhookEvent[] {
  const events: WebhookEvent[] = [];
  const reasonBefore = readyOf(before.conditions)?.reason;
  const reasonAfter = readyOf(after.conditions)?.reason;
  if (reasonAfter === HarnessReasons.Expired && reasonBefore !== HarnessReasons.Expired)
    events.push("expired");
  if (after.restart_count > before.restart_count) events.push("restarted");
  if (after.phase !== before.phase)
    switch (after.phase) {
      case "Ready":
        events.push("ready");
        break;
      case "Paused":
        events.push("paused");
        break;
      case "Stopped":
        events.push(reasonAfter === HarnessReasons.Evicted ? "evicted" : "stopped");
        break;
      case "Failed":
        events.push("failed");
        break;
      case "Pending":
      case "Draining":
        break;
      default: {
        const exhaustive: never = after.phase;
        return exhaustive;
      }
    }
  return events;
}

/** One transition of `record` (its Ready condition's reason and message). */
export function transitionOf(record: HarnessRecord, event: WebhookEvent, time: string): SessionTransition {
  const ready = readyOf(record.conditions);
  return {
    event,
    session: { namespace: record.namespace, name: record.name, uid: record.uid },
    phase: record.phase,
    reason: ready?.reason ?? record.phase,
    message: ready?.message ?? "",
    time,
  };
}

/**
 * The HarnessStore the controllers write through, telling `onTransition` of each transition a
 * write made (created, a phase entered, a restart, an expiry, deleted), after the write. Every
 * status change goes through these few writes, so no controller needs to know about webhooks;
 * `onTransition` must return at once (it only queues).
 */
export function observedHarnessStore(
  inner: HarnessStore,
  onTransition: (transition: SessionTransition) => void,
  now: () => Date = () => new Date(),
): HarnessStore {
  const tell = (record: HarnessRecord, events: readonly WebhookEvent[]) => {
    const time = now().toISOString();
    for (const event of events) onTransition(transitionOf(record, event, time));
  };
  const overrides: Partial<HarnessStore> = {
    async createHarnessSession(session) {
      const created = await inner.createHarnessSession(session);
      const ready = readyOf(created.conditions);
      onTransition({
        ...transitionOf(created, "created", created.created_at),
        reason: "Created",
        message: ready?.message ?? "created",
      });
      return created;
    },
    async setObserved(namespace, name, patch) {
      const touches =
        patch.phase !== undefined || patch.conditions !== undefined || patch.restart_count !== undefined;
      const before = touches ? await inner.getHarnessSession(namespace, name) : undefined;
      const after = await inner.setObserved(namespace, name, patch);
      if (before && after) tell(after, transitionEvents(before, after));
      return after;
    },
    async beginDraining(namespace, name, change) {
      const begun = await inner.beginDraining(namespace, name, change);
      if (begun && change.to === "Paused") {
        const after = await inner.getHarnessSession(namespace, name);
        if (after) tell(after, ["paused"]);
      }
      return begun;
    },
    async deleteHarnessSession(namespace, name) {
      const before = await inner.getHarnessSession(namespace, name);
      const deleted = await inner.deleteHarnessSession(namespace, name);
      if (deleted && before) {
        const ready = readyOf(before.conditions);
        const expired = ready?.reason === HarnessReasons.Expired;
        onTransition({
          ...transitionOf(before, "deleted", now().toISOString()),
          phase: "Deleted",
          reason: expired ? HarnessReasons.Expired : HarnessReasons.Deleting,
          message: expired ? (ready?.message ?? "expired") : "deleted",
        });
      }
      return deleted;
    },
  };
  return new Proxy(inner, {
    get(target, property) {
      const own = (overrides as Record<PropertyKey, unknown>)[property];
      if (own !== undefined) return own;
      const value: unknown = Reflect.get(target, property);
      return typeof value === "function" ? (value as (...args: unknown[]) => unknown).bind(target) : value;
    },
  });
}
