/**
 * The runner link's transport when server and runner share a process (`serve` with its embedded
 * runner): the same envelopes as on the WebSocket (proxy/PROTOCOL.md), as the same JSON text
 * (and the same binary frames, as bytes), handed over in memory instead of through a loopback socket. Each side validates on send and on
 * receive exactly as over the WebSocket; only the socket is gone (its syscalls, framing, masking
 * and the wake-ups of a second read). Standalone runners keep the WebSocket.
 *
 * Semantics kept from the socket: messages arrive in order, never within the sender's call (in a
 * later turn of the event loop, the messages of one turn together); a receiver may pause, and
 * what waits for it counts in the sender's `bufferedAmount` (the runner's agents wait on that,
 * PROTOCOL.md §8); either end may close with a code and reason, and both ends then see `close`.
 * Server and runner never import each other: each gets its end from the composition point
 * (bin/commands/serve.ts).
 */
import type { ApiErrorBody } from "./errors.ts";

/** One message of the link: an envelope's JSON text, or a binary frame's bytes. */
export type LinkMessage = string | Uint8Array;

/** Its size in bytes, as a socket's buffer would count it. */
export function linkMessageBytes(message: LinkMessage): number {
  return typeof message === "string" ? Buffer.byteLength(message) : message.byteLength;
}

/** WebSocket's code for a link that ended without a close frame (RFC 6455 §7.1.5). */
export const CLOSED_ABNORMALLY = 1006;

/** One end of an in-process runner link. */
export interface LinkChannel {
  /** Until either end closes. */
  readonly open: boolean;
  /** Bytes sent from this end that the peer has not taken yet (what a socket's send buffer holds). */
  readonly bufferedAmount: number;
  /** Whether this end has stopped taking messages (they wait, counted in the peer's `bufferedAmount`). */
  readonly isPaused: boolean;
  /**
   * Hand one message to the peer: an envelope (JSON text) or a binary frame
   * (contracts/runner-binary.ts; handed over as it is, so the sender lets go of it). Dropped once
   * the link is closed.
   */
  send(message: LinkMessage): void;
  pause(): void;
  resume(): void;
  /** Close the link: both ends see `close(code, reason)`, after what was sent before it. */
  close(code: number, reason: string): void;
  onMessage(listener: (message: LinkMessage) => void): void;
  onClose(listener: (code: number, reason: string) => void): void;
}

/**
 * How an embedded runner dials its server in process: the bearer it would present on the
 * WebSocket upgrade, checked the same way; a refusal carries the HTTP status the upgrade would
 * have been refused with.
 */
export type InProcessDial = (bearer: string) => Promise<DialOutcome>;
export type DialOutcome =
  | { ok: true; channel: LinkChannel }
  | { ok: false; status: number; error: ApiErrorBody };

/**
 * How the server takes a runner link whose runner end is elsewhere (`serve`'s embedded runner in a
 * worker thread, contracts/runner-port-channel.ts): the bearer checked as on the upgrade, then the
 * hub speaks over `server`, the server's end; a refusal as `InProcessDial`'s.
 */
export type ChannelAdmission = (bearer: string, server: LinkChannel) => Promise<Admission>;
export type Admission = { ok: true } | { ok: false; status: number; error: ApiErrorBody };

type CloseListener = (code: number, reason: string) => void;

/** One direction of the link: messages in order, their bytes, who takes them. */
class Direction {
  #queue: LinkMessage[] = [];
  #sizes: number[] = [];
  #head = 0;
  bytes = 0;
  paused = false;
  #scheduled = false;
  listener: ((message: LinkMessage) => void) | undefined;

  push(message: LinkMessage): void {
    const size = linkMessageBytes(message);
    this.#queue.push(message);
    this.#sizes.push(size);
    this.bytes += size;
    this.schedule();
  }

  schedule(): void {
    if (this.#scheduled || this.paused || this.#head === this.#queue.length) return;
    this.#scheduled = true;
    // A later macrotask, like a socket's read: the receiver never runs inside the sender's call,
    // and everything sent in one turn is taken in one go.
    setImmediate(() => {
      this.#scheduled = false;
      this.deliver();
    });
  }

  /** Hand waiting messages over, in order, until the receiver pauses. */
  deliver(): void {
    while (this.#head < this.#queue.length && !this.paused) {
      const message = this.#queue[this.#head] as LinkMessage;
      this.bytes -= this.#sizes[this.#head] as number;
      this.#head += 1;
      this.listener?.(message);
    }
    if (this.#head === this.#queue.length) this.drop();
    else if (this.#head > 1024 && this.#head * 2 > this.#queue.length) {
      // Compacted now and then, not shifted per message: a paused receiver may let thousands wait.
      this.#queue = this.#queue.slice(this.#head);
      this.#sizes = this.#sizes.slice(this.#head);
      this.#head = 0;
    }
  }

  drop(): void {
    this.#queue = [];
    this.#sizes = [];
    this.#head = 0;
    this.bytes = 0;
  }
}

/**
 * A connected pair of ends: `runner` for the runner's link, `server` for the hub. Messages one
 * end sends the other receives.
 */
export function inProcessLink(): { runner: LinkChannel; server: LinkChannel } {
  let open = true;
  const toServer = new Direction();
  const toRunner = new Direction();
  const runnerCloses: CloseListener[] = [];
  const serverCloses: CloseListener[] = [];
  const close = (code: number, reason: string) => {
    if (!open) return;
    open = false; // nothing more is sent from here on
    setImmediate(() => {
      // What was sent before the close is still taken (a socket's close frame comes after the
      // data), unless its receiver paused: then it is lost with the link, as a socket's would be.
      toServer.deliver();
      toRunner.deliver();
      toServer.drop();
      toRunner.drop();
      for (const listener of [...runnerCloses, ...serverCloses]) listener(code, reason);
    });
  };
  const end = (out: Direction, incoming: Direction, closes: CloseListener[]): LinkChannel => ({
    get open() {
      return open;
    },
    get bufferedAmount() {
      return out.bytes;
    },
    get isPaused() {
      return incoming.paused;
    },
    send(message) {
      if (open) out.push(message);
    },
    pause() {
      incoming.paused = true;
    },
    resume() {
      incoming.paused = false;
      if (open) incoming.schedule();
    },
    close,
    onMessage(listener) {
      incoming.listener = listener;
    },
    onClose(listener) {
      closes.push(listener);
    },
  });
  return {
    runner: end(toServer, toRunner, runnerCloses),
    server: end(toRunner, toServer, serverCloses),
  };
}
