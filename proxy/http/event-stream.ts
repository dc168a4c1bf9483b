import { DnsLabel } from "../../contracts/session-spec.ts";
import { Hono } from "hono";
import { type SSEStreamingApi, streamSSE } from "hono/streaming";
import { z } from "zod";
import { CodedError } from "../../contracts/errors.ts";
import type { EventBus } from "../lifecycle/event-bus.ts";
import { CallerBounds, isAdminCaller } from "../lifecycle/caller-bounds.ts";
import { NamespaceBounds, scopedNamespaces } from "../lifecycle/namespace-bounds.ts";
import { parseInput } from "../lifecycle/request-body.ts";
import type { Store, StoredFrame } from "../store/store.ts";
import type { Principal } from "./api-tokens.ts";
import type { SessionLabel, SessionVisibility } from "./event-access.ts";

export type EventStreamOptions = {
  store: Store;
  bus: EventBus;
  /**
   * A HarnessSession's record by namespace and name (`?namespace=&name=`: its frames only, across
   * its restarts, by the workspace it owns). Absent: those parameters are UNIMPLEMENTED.
   */
  harnessSession?: (namespace: string, name: string) => Promise<HarnessRef | undefined>;
  /**
   * Whom a session's frames are about (event-access.ts `sessionLabels`): each frame on the wire
   * carries its `namespace` and `name` (issue 42). Absent: frames go as stored.
   */
  sessionLabel?: (sessionId: string) => Promise<SessionLabel | undefined>;
  /** Comment lines keep idle connections (and proxies) open. @default 15000 */
  keepAliveMs?: number;
  /** A follower further behind than this is cut off; it resumes from the store. @default 10000 */
  maxQueuedFrames?: number;
  /**
   * Bytes of frames waiting for one follower (queued and being written) at most: past it the
   * follower is dropped, told to reconnect with Last-Event-ID (it resumes from the store). A
   * slow reader costs this much memory, never more. @default 8388608
   */
  maxQueuedBytes?: number;
  /** How long a dropped follower may take to read what was on its way before its connection is cut. @default 30000 */
  dropGraceMs?: number;
  /** Ends every stream (server shutdown). */
  shutdown?: AbortSignal;
  /**
   * Streams of API tokens open at once at most; one more is 429 RESOURCE_EXHAUSTED. An admin's
   * streams are not counted: tenants filling the server never lock the operator out. @default 2000
   */
  maxSubscribers?: number;
  /** Streams one API token may hold at once (an admin: unbounded). @default 16 */
  maxSubscribersPerToken?: number;
  /**
   * Streams the tokens scoped to one namespace may hold together (namespace-bounds.ts; a token
   * counts toward each namespace its scopes name, an admin toward none). @default 64
   */
  maxSubscribersPerNamespace?: number;
  /**
   * Which sessions' frames a caller may see (event-access.ts); undefined from it: all. A session
   * it may not see is NOT_FOUND, like one that is not there. @default everything
   */
  visibilityOf?: (principal: Principal) => SessionVisibility | undefined;
  /**
   * Whether the stream's `Authorization` still opens the API (not expired, not revoked): an open
   * stream asks every `revalidateMs`, after each revocation (`onRevoked`), and ends at its token's
   * `expiresAt`, with an `error` event UNAUTHENTICATED. Absent: only the expiry ends it.
   */
  revalidate?: (authorization: string | undefined) => Promise<boolean>;
  /** How often an open stream checks its token again (revocation on another replica). @default 5000 */
  revalidateMs?: number;
  /** Subscribes to this process's revocations; returns the unsubscribe. */
  onRevoked?: (listener: () => void) => () => void;
};

/** Longest delay setTimeout takes (about 24.8 days); a later expiry is re-armed by the periodic check. */
const MAX_TIMER_MS = 2 ** 31 - 1;

/** Sessions whose visibility one stream remembers at most (then it asks again). */
const VISIBILITY_CACHE_MAX = 10_000;

const PAGE = 500;

/** What the event stream needs of a HarnessSession to follow it by name. */
export type HarnessRef = { container_name?: string | undefined; session_id?: string | undefined };
const Cursor = z.coerce.number().int().nonnegative();
const SessionIdParam = z.string().min(1).max(128);

/**
 * `GET /v1/events`: compass.v1 frames (status transitions included) as server-sent events.
 *
 * - `?session_id=` follows one session; the event id is its per-session `seq`.
 *   Without it every session is followed and the event id is the store's global frame id.
 * - `Last-Event-ID` (or `?last_event_id=`, for clients that cannot set headers) resumes after
 *   that id: the retained frames come from the store, then live ones, without loss or repeats.
 *   Without a cursor the stream starts with the next frame.
 * - When the frames after the cursor were already trimmed from the bounded buffer, an
 *   `event: gap` with `{session_id, namespace?, name?, from_seq, to_seq}` says which ones are gone before the rest.
 */
export function eventRoutes(options: EventStreamOptions): Hono {
  const { store, bus } = options;
  const keepAliveMs = options.keepAliveMs ?? 15_000;
  const maxQueued = options.maxQueuedFrames ?? 10_000;
  const maxQueuedBytes = options.maxQueuedBytes ?? 8 * 1024 * 1024;
  const dropGraceMs = options.dropGraceMs ?? 30_000;
  const maxSubscribers = options.maxSubscribers ?? 2_000;
  const revalidateMs = options.revalidateMs ?? 5_000;
  const perToken = new CallerBounds(
    options.maxSubscribersPerToken ?? 16,
    "open event streams",
    "AGENT_SESSIONS_EVENT_SUBSCRIBERS_PER_TOKEN_MAX",
  );
  const perNamespace = new NamespaceBounds(
    options.maxSubscribersPerNamespace ?? 64,
    "open event streams",
    "AGENT_SESSIONS_EVENT_SUBSCRIBERS_PER_NAMESPACE_MAX",
  );
  let open = 0;
  const labels = new SessionLabels(options.sessionLabel);
  const runs = new SharedRuns(labels);

  return new Hono().get("/", async (c) => {
    const rawSession = c.req.query("session_id");
    const sessionId =
      rawSession === undefined
        ? undefined
        : parseInput(SessionIdParam, rawSession, "session_id", { in: "query", name: "session_id" });
    const header = c.req.header("Last-Event-ID");
    const rawCursor = header ?? c.req.query("last_event_id");
    const cursorSource =
      header !== undefined
        ? ({ in: "header", name: "Last-Event-ID" } as const)
        : ({ in: "query", name: "last_event_id" } as const);
    const cursor =
      rawCursor === undefined || rawCursor === ""
        ? undefined
        : parseInput(Cursor, rawCursor, "Last-Event-ID", cursorSource);
    const principal = c.get("principal") as Principal | undefined;
    const visible = principal ? options.visibilityOf?.(principal) : undefined;
    const byName = await harnessFilter(c.req.query("namespace"), c.req.query("name"), options, visible);
    if (byName && sessionId !== undefined)
      throw new CodedError(
        "INVALID_ARGUMENT",
        "follow a session by session_id or by namespace and name, not both",
      );
    if (
      sessionId !== undefined &&
      (!(await store.getSession(sessionId)) || (visible !== undefined && !(await visible(sessionId))))
    )
      throw new CodedError("NOT_FOUND", `session ${sessionId} not found`);
    // One session's stream was checked above; the stream of everything shows only what the caller may see.
    const shows = byName ?? (sessionId === undefined ? cachedVisibility(visible) : undefined);
    const keyOf = (f: StoredFrame) => (sessionId === undefined ? f.id : f.frame.seq);
    // Each follower holds a socket, a bus subscription and a queue: their number is bounded, per
    // token and for all tokens together; an admin's are neither (they are the operator's own).
    const admin = isAdminCaller(principal);
    if (!admin && open >= maxSubscribers)
      throw new CodedError(
        "RESOURCE_EXHAUSTED",
        `${open} event streams are open, the most this server serves (AGENT_SESSIONS_EVENT_SUBSCRIBERS_MAX); retry later`,
        { limit: maxSubscribers },
      );
    const releaseToken = perToken.acquire(principal);
    let releaseNamespaces: () => void;
    try {
      releaseNamespaces = perNamespace.acquire(principal, scopedNamespaces(principal));
    } catch (error) {
      releaseToken();
      throw error;
    }
    const release = () => {
      releaseNamespaces();
      releaseToken();
    };
    // Counted until the stream's callback ends (its `finally`); nothing before it can throw.
    if (!admin) open++;

    return streamSSE(c, async (stream) => {
      // Subscribe before reading the backlog so nothing published in between is missed;
      // the cursor drops what the backlog already sent.
      const queue: StoredFrame[] = [];
      let wake: (() => void) | undefined;
      // Bytes waiting in `queue`, and in the write under way (not yet taken by the client).
      let queuedBytes = 0;
      let writingBytes = 0;
      let dropped = false;
      /** When dropped: the follower has everything up to this key (its Last-Event-ID to resume with). */
      let resumeAfter: number | undefined;
      let dropTimer: NodeJS.Timeout | undefined;
      /**
       * Too far behind: let go of the bus and the queue at once (the memory is freed now), tell
       * the follower where to resume once what is being written reached it, and cut the
       * connection if it takes nothing within the grace.
       */
      const drop = (next: StoredFrame) => {
        dropped = true;
        resumeAfter = keyOf(queue[0] ?? next) - 1;
        unsubscribe();
        queue.length = 0;
        queuedBytes = 0;
        wake?.();
        dropTimer = setTimeout(() => {
          stream.abort();
          (c.env as { outgoing?: { destroy(): void } } | undefined)?.outgoing?.destroy();
        }, dropGraceMs);
        dropTimer.unref();
      };
      const unsubscribe = bus.subscribe((f) => {
        if (dropped) return;
        const bytes = eventData(f, labels).bytes;
        if (queue.length >= maxQueued || queuedBytes + writingBytes + bytes > maxQueuedBytes) {
          drop(f);
          return;
        }
        queue.push(f);
        queuedBytes += bytes;
        wake?.();
      }, sessionId);
      const stop = new AbortController();
      const end = () => {
        stop.abort();
        wake?.();
      };
      // A stream outlives no token (issue 34): it ends at the token's expiry or once it is revoked.
      let unauthenticated = false;
      const endUnauthenticated = () => {
        unauthenticated = true;
        end();
      };
      const authorization = c.req.header("authorization");
      const check = () => {
        if (stop.signal.aborted || !options.revalidate) return;
        options.revalidate(authorization).then(
          (valid) => {
            if (!valid) endUnauthenticated();
          },
          () => {}, // the store failing is not the token failing: the next check asks again
        );
      };
      const expiresAt = principal?.expiresAt === undefined ? undefined : Date.parse(principal.expiresAt);
      const expiry =
        expiresAt === undefined
          ? undefined
          : setTimeout(endUnauthenticated, Math.min(Math.max(0, expiresAt - Date.now()), MAX_TIMER_MS));
      expiry?.unref();
      const recheck = options.revalidate ? setInterval(check, revalidateMs) : undefined;
      recheck?.unref();
      const offRevoked = options.onRevoked?.(check);
      stream.onAbort(end);
      c.req.raw.signal.addEventListener("abort", end, { once: true });
      options.shutdown?.addEventListener("abort", end, { once: true });
      try {
        let last = cursor;
        if (cursor !== undefined)
          last = await sendBacklog(stream, store, { sessionId, cursor, keyOf, shows, labels }, stop.signal);
        while (!stop.signal.aborted && !dropped) {
          if (queue.length === 0) {
            await new Promise<void>((resolve) => {
              const timer = setTimeout(resolve, keepAliveMs);
              wake = () => {
                clearTimeout(timer);
                resolve();
              };
            });
            wake = undefined;
            if (queue.length === 0 && !stop.signal.aborted) await stream.write(": keepalive\n\n");
            continue;
          }
          // Frames of one burst arrive in one macrotask (a runner's WebSocket read); waiting for
          // its end puts them in one write instead of one write (and one syscall) each.
          await new Promise<void>((resolve) => setImmediate(resolve));
          // Everything queued in one write: a follower that fell behind catches up in one go.
          writingBytes = queuedBytes;
          queuedBytes = 0;
          const frames = queue.splice(0);
          // Each frame names its session's namespace and HarnessSession: looked up once per session.
          const naming = labels.resolve(frames);
          if (naming) await naming;
          // Followers woken by the same frames write the same bytes: built once, shared.
          const shared = shows === undefined ? runs.get(frames, sessionId === undefined, last) : undefined;
          if (shared !== undefined) {
            last = shared.last;
            await stream.write(shared.bytes);
            writingBytes = 0;
            continue;
          }
          const chunks: Buffer[] = [];
          for (const f of frames) {
            const key = keyOf(f);
            if (last !== undefined && key <= last) continue;
            if (shows && !(await shows(f.frame.session_id))) continue;
            chunks.push(sseEvent(key, f, labels));
            last = key;
          }
          if (chunks.length > 0)
            await stream.write(chunks.length === 1 ? (chunks[0] as Buffer) : Buffer.concat(chunks));
          writingBytes = 0;
        }
        if (unauthenticated && !c.req.raw.signal.aborted)
          await stream.writeSSE({
            event: "error",
            data: JSON.stringify({
              code: "UNAUTHENTICATED",
              message:
                "this stream's token expired or was revoked; open a new stream with a valid token (Last-Event-ID resumes)",
              ...(last !== undefined ? { last_event_id: last } : {}),
            }),
          });
        else if (dropped && !stop.signal.aborted)
          await stream.writeSSE({
            event: "reconnect",
            data: JSON.stringify({
              code: "RESOURCE_EXHAUSTED",
              message: `this stream fell more than ${maxQueuedBytes} bytes behind (AGENT_SESSIONS_EVENT_QUEUE_MAX_BYTES) and is closed; reconnect with Last-Event-ID: ${last ?? resumeAfter} to resume from the store`,
              last_event_id: last ?? resumeAfter,
            }),
          });
      } finally {
        clearTimeout(dropTimer);
        clearTimeout(expiry);
        clearInterval(recheck);
        offRevoked?.();
        if (!admin) open--;
        release();
        unsubscribe();
        options.shutdown?.removeEventListener("abort", end);
      }
    });
  });
}

/**
 * The labels of the sessions whose frames go out (issue 42), shared by every follower of this
 * server: asked once per session (settled answers are kept), and again for an unsettled one.
 */
class SessionLabels {
  readonly #lookup: ((sessionId: string) => Promise<SessionLabel | undefined>) | undefined;
  readonly #known = new Map<string, SessionLabel | undefined>();
  readonly #asking = new Map<string, Promise<void>>();

  constructor(lookup: ((sessionId: string) => Promise<SessionLabel | undefined>) | undefined) {
    this.#lookup = lookup;
  }

  /** What is known of a session now (undefined: nothing yet, or no lookup). */
  peek(sessionId: string): SessionLabel | undefined {
    return this.#known.get(sessionId);
  }

  /** Ask for the sessions of `frames` not settled yet; undefined when every one is (no await). */
  resolve(frames: readonly StoredFrame[]): Promise<void> | undefined {
    const lookup = this.#lookup;
    if (lookup === undefined) return undefined;
    const pending: Promise<void>[] = [];
    for (const { frame } of frames) {
      const id = frame.session_id;
      if (this.#known.get(id)?.settled) continue;
      let asking = this.#asking.get(id);
      if (asking === undefined) {
        asking = lookup(id).then(
          (label) => {
            this.#asking.delete(id);
            if (this.#known.size >= VISIBILITY_CACHE_MAX) this.#known.clear();
            this.#known.set(id, label);
          },
          // The store failing: the frame goes without its names, the next one asks again.
          () => {
            this.#asking.delete(id);
          },
        );
        this.#asking.set(id, asking);
      }
      pending.push(asking);
    }
    return pending.length === 0 ? undefined : Promise.all(pending).then(() => undefined);
  }
}

/**
 * The SSE `data` of each frame and its size, serialized once however many followers write it,
 * and its events as UTF-8 by event id (the global id or the session's seq: at most two), encoded
 * once too: a follower's write is then a copy of bytes, not an encoding of text. The data names
 * the session's namespace and HarnessSession as known when it was built; built again once more
 * is known (a session's first frames may go out before its HarnessSession recorded it).
 */
type Serialized = {
  data: string;
  bytes: number;
  label: SessionLabel | undefined;
  events?: Map<number, Buffer>;
};
const serialized = new WeakMap<StoredFrame, Serialized>();

function eventData(stored: StoredFrame, labels: SessionLabels): Serialized {
  let entry = serialized.get(stored);
  const label = labels.peek(stored.frame.session_id);
  if (entry === undefined || entry.label !== label) {
    const named =
      label === undefined
        ? stored.frame
        : {
            ...stored.frame,
            namespace: label.namespace,
            ...(label.name !== undefined ? { name: label.name } : {}),
          };
    const data = JSON.stringify(named);
    entry = { data, bytes: Buffer.byteLength(data), label };
    serialized.set(stored, entry);
  }
  return entry;
}

/**
 * One server-sent event, as hono's `writeSSE` writes it (`data:` then `id:`). Serialized JSON
 * never holds a raw CR or LF, so the data is one line.
 */
function sseEvent(id: number, stored: StoredFrame, labels: SessionLabels): Buffer {
  const entry = eventData(stored, labels);
  entry.events ??= new Map();
  let event = entry.events.get(id);
  if (event === undefined) {
    event = Buffer.from(`data: ${entry.data}\nid: ${id}\n\n`);
    entry.events.set(id, event);
  }
  return event;
}

/**
 * The bytes of a run of frames (a follower's queue at one write), kept until the event loop's
 * next turn: every follower woken by the same publishes holds the same run (the bus hands each
 * the same frame objects in the same order), so a burst to n followers is encoded and
 * concatenated once instead of n times. A run is identified by its first and last frame, its
 * length and the event id kind (`byId`: the global id, else the per-session seq); between one first and one last
 * frame, runs of the same length are the same frames.
 */
class SharedRuns {
  readonly #byFirst = new Map<StoredFrame, SharedRun[]>();
  readonly #labels: SessionLabels;
  #clearing = false;

  constructor(labels: SessionLabels) {
    this.#labels = labels;
  }

  /** The run's bytes and last key, or undefined when a frame of it was already sent (`last`). */
  get(
    frames: StoredFrame[],
    byId: boolean,
    last: number | undefined,
  ): { bytes: Buffer; last: number } | undefined {
    const first = frames[0];
    const final = frames[frames.length - 1];
    if (first === undefined || final === undefined) return undefined;
    let candidates = this.#byFirst.get(first);
    let run = candidates?.find((r) => r.last === final && r.count === frames.length && r.byId === byId);
    if (run === undefined) {
      const keys = frames.map((f) => (byId ? f.id : f.frame.seq));
      // Keys rise along a run (ids and seqs are assigned in publish order); anything else is built per follower.
      for (let i = 1; i < keys.length; i++)
        if ((keys[i] as number) <= (keys[i - 1] as number)) return undefined;
      const chunks = frames.map((f, i) => sseEvent(keys[i] as number, f, this.#labels));
      run = {
        last: final,
        count: frames.length,
        byId,
        minKey: keys[0] as number,
        maxKey: keys[keys.length - 1] as number,
        bytes: chunks.length === 1 ? (chunks[0] as Buffer) : Buffer.concat(chunks),
      };
      if (candidates === undefined) {
        candidates = [];
        this.#byFirst.set(first, candidates);
      }
      candidates.push(run);
      if (!this.#clearing) {
        this.#clearing = true;
        setImmediate(() => {
          this.#byFirst.clear();
          this.#clearing = false;
        });
      }
    }
    if (last !== undefined && run.minKey <= last) return undefined;
    return { bytes: run.bytes, last: run.maxKey };
  }
}

type SharedRun = {
  last: StoredFrame;
  count: number;
  byId: boolean;
  minKey: number;
  maxKey: number;
  bytes: Buffer;
};

/** A visibility check that asks once per session (the answer does not change for a session). */
/**
 * `?namespace=&name=` (issue 42, `agent-sessions events --session NAME`): the frames of the agent
 * sessions run in the HarnessSession's workspace (every one across its restarts), and nothing
 * else. A session the caller may not see is NOT_FOUND, as an unknown one; one not provisioned yet
 * is followed from when it is (the record is read again for a session id not seen before).
 */
async function harnessFilter(
  rawNamespace: string | undefined,
  rawName: string | undefined,
  options: EventStreamOptions,
  visible: SessionVisibility | undefined,
): Promise<SessionVisibility | undefined> {
  if (rawNamespace === undefined && rawName === undefined) return undefined;
  const namespace = parseInput(DnsLabel, rawNamespace ?? "", "namespace", { in: "query", name: "namespace" });
  const name = parseInput(DnsLabel, rawName ?? "", "name", { in: "query", name: "name" });
  if (!options.harnessSession)
    throw new CodedError("UNIMPLEMENTED", "this server follows no HarnessSession by name");
  const lookup = options.harnessSession;
  const notFound = () => new CodedError("NOT_FOUND", `HarnessSession ${namespace}/${name} not found`);
  let record = await lookup(namespace, name);
  if (!record) throw notFound();
  if (visible !== undefined && (record.session_id === undefined || !(await visible(record.session_id))))
    throw notFound();
  const known = new Map<string, boolean>();
  return async (sessionId) => {
    let answer = known.get(sessionId);
    if (answer === undefined) {
      const session = await options.store.getSession(sessionId);
      if (session && record?.container_name === undefined) record = (await lookup(namespace, name)) ?? record;
      answer = session !== undefined && session.container_name === record?.container_name;
      if (known.size >= VISIBILITY_CACHE_MAX) known.clear();
      known.set(sessionId, answer);
    }
    return answer;
  };
}

function cachedVisibility(visible: SessionVisibility | undefined): SessionVisibility | undefined {
  if (visible === undefined) return undefined;
  const known = new Map<string, boolean>();
  return async (sessionId) => {
    let answer = known.get(sessionId);
    if (answer === undefined) {
      answer = await visible(sessionId);
      if (known.size >= VISIBILITY_CACHE_MAX) known.clear();
      known.set(sessionId, answer);
    }
    return answer;
  };
}

/** The retained frames after the cursor, page by page (those `shows` allows); returns the last id read. */
async function sendBacklog(
  stream: SSEStreamingApi,
  store: Store,
  from: {
    sessionId: string | undefined;
    cursor: number;
    keyOf: (f: StoredFrame) => number;
    shows: SessionVisibility | undefined;
    labels: SessionLabels;
  },
  signal: AbortSignal,
): Promise<number> {
  const { sessionId, cursor, keyOf, shows, labels } = from;
  let last = cursor;
  let first = true;
  while (!signal.aborted) {
    const page = await store.readFrames({ sessionId, after: last, limit: PAGE });
    const naming = labels.resolve(page);
    if (naming) await naming;
    const head = page[0];
    if (first && sessionId !== undefined && head && head.frame.seq > last + 1) {
      // Named like the frames that follow it (its session's namespace and HarnessSession).
      const label = labels.peek(sessionId);
      await stream.writeSSE({
        event: "gap",
        data: JSON.stringify({
          session_id: sessionId,
          ...(label === undefined ? {} : { namespace: label.namespace }),
          ...(label?.name === undefined ? {} : { name: label.name }),
          from_seq: last + 1,
          to_seq: head.frame.seq - 1,
        }),
      });
    }
    first = false;
    const chunks: Buffer[] = [];
    for (const f of page) {
      last = keyOf(f);
      if (shows && !(await shows(f.frame.session_id))) continue;
      chunks.push(sseEvent(last, f, labels));
    }
    if (chunks.length > 0) await stream.write(Buffer.concat(chunks));
    if (page.length < PAGE) break;
  }
  return last;
}
