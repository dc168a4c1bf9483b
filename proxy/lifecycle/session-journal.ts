import type { FrameType } from "../../contracts/compass.ts";
import type { EventBus } from "./event-bus.ts";
import type {
  NewSession,
  SessionChange,
  SessionRecord,
  Store,
  StoredFrame,
  Transition,
} from "../store/store.ts";

/**
 * Every write that clients can follow goes through here: the store first (it assigns the seq),
 * then the bus. So the event stream never shows what the store does not have.
 */
export class SessionJournal {
  readonly #store: Store;
  readonly #bus: EventBus;

  constructor(store: Store, bus: EventBus) {
    this.#store = store;
    this.#bus = bus;
  }

  /** Record a new session and publish its first status frame (its initial state, seq 1). */
  async create(session: NewSession): Promise<SessionRecord> {
    const created = await this.#store.insertSession(session);
    await this.append(session.session_id, { type: "status", payload: { state: session.state } });
    return created;
  }

  /** Change a session's state and publish its status frame; undefined when nothing changed. */
  async transition(sessionId: string, change: SessionChange): Promise<Transition | undefined> {
    const transition = await this.#store.transitionSession(sessionId, change);
    if (transition) this.#bus.publish(transition.frame);
    return transition;
  }

  /** Store and publish an agent frame under the session's next seq; undefined for an unknown session. */
  async append(
    sessionId: string,
    frame: { type: FrameType; ts?: string | undefined; payload: Record<string, unknown> },
  ): Promise<StoredFrame | undefined> {
    const stored = await this.#store.appendFrame(sessionId, {
      type: frame.type,
      ts: frame.ts ?? new Date().toISOString(),
      payload: frame.payload,
    });
    if (stored) this.#bus.publish(stored);
    return stored;
  }
}
