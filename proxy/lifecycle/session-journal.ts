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
 * Where written frames go when several server replicas share the store: each replica reads
 * them back from the store in order and publishes them to its own bus (proxy/cluster/).
 */
export type WrittenFrames = { written(): void };

/**
 * Every write that clients can follow goes through here: the store first (it assigns the seq),
 * then the bus. So the event stream never shows what the store does not have. With several
 * replicas (`fanout`), the bus is fed from the store by the fan-out instead, so followers of every
 * replica see every replica's frames in one order.
 */
export class SessionJournal {
  readonly #store: Store;
  readonly #publish: (frame: StoredFrame) => void;

  constructor(store: Store, bus: EventBus, fanout?: WrittenFrames) {
    this.#store = store;
    this.#publish = fanout ? () => fanout.written() : (frame) => bus.publish(frame);
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
    if (transition) this.#publish(transition.frame);
    return transition;
  }

  /**
   * Store and publish an agent frame under the session's next seq; undefined for an unknown
   * session. `grouped`: committed with this turn's other writes (Store.appendFrame).
   */
  async append(
    sessionId: string,
    frame: { type: FrameType; ts?: string | undefined; payload: Record<string, unknown> },
    options?: { grouped?: boolean },
  ): Promise<StoredFrame | undefined> {
    const stored = await this.#store.appendFrame(
      sessionId,
      { type: frame.type, ts: frame.ts ?? new Date().toISOString(), payload: frame.payload },
      options,
    );
    if (stored) this.#publish(stored);
    return stored;
  }
}
