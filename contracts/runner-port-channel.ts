/**
 * The runner link's transport when server and runner run on different threads of one process
 * (`serve` with its embedded runner in a worker thread): one end of a LinkChannel
 * (contracts/runner-channel.ts) over a `MessagePort`, the same envelopes as the same JSON text,
 * binary frames (contracts/runner-binary.ts) as Uint8Arrays whose memory is transferred.
 *
 * The channel's semantics hold across the threads: messages arrive in order and never within the
 * sender's call (a port delivers in a later turn; what one turn sends goes in one post); a
 * receiver may pause, and what waits for it counts in the sender's `bufferedAmount` until the
 * receiver has taken it (each end acknowledges the bytes it took, a few ms late at most: see
 * ACK_DELAY_MS), so the runner's agents still wait on it (PROTOCOL.md §8); either end may close with a code and reason, and both
 * ends see `close`; a peer whose thread ended without closing (a worker that died) is seen as a
 * close with 1006.
 */
import type { MessagePort } from "node:worker_threads";
import { CLOSED_ABNORMALLY, type LinkChannel, type LinkMessage, linkMessageBytes } from "./runner-channel.ts";

/** How long a close waits for the peer to take it (a WebSocket's closing handshake, shorter). */
const CLOSE_GRACE_MS = 5_000;

/**
 * Bytes taken are acknowledged on the next message this end sends (a request's answer carries the
 * acknowledgement of the request), else after ACK_DELAY_MS, or at once past ACK_BYTES: a post and
 * a wake-up of the other thread fewer per message, while the sender's `bufferedAmount` is late by
 * at most that much (the runner waits on it past 1 MiB, polling every 10 ms: runner/relay/).
 */
const ACK_DELAY_MS = 5;
const ACK_BYTES = 64 * 1024;

/** What goes over the port: messages with their sizes, bytes taken, a close. */
type PortFrame =
  | { k: "m"; texts: LinkMessage[]; sizes: number[]; ack: number }
  | { k: "a"; bytes: number }
  | { k: "c"; code: number; reason: string };

/** One end of a runner link over `port`; its peer is `portChannel` of the port's other end. */
export function portChannel(port: MessagePort): LinkChannel {
  let open = true;
  /** Bytes sent and not yet acknowledged by the peer. */
  let buffered = 0;
  let paused = false;
  let listener: ((message: LinkMessage) => void) | undefined;
  const closes: ((code: number, reason: string) => void)[] = [];
  /** Sent in this turn, posted together. */
  let outTexts: LinkMessage[] = [];
  let outSizes: number[] = [];
  /** The memory of this turn's binary frames that owned it whole: moved to the peer, not copied. */
  let outTransfer: ArrayBuffer[] = [];
  /** Received and not yet taken (the receiver paused, or a turn has not come). */
  let inTexts: LinkMessage[] = [];
  let inSizes: number[] = [];
  let inHead = 0;
  let taken = 0;
  let deliveryScheduled = false;
  let ackScheduled = false;
  let ended = false;
  /** This end's own close, while its peer may already be gone. */
  let closing: { code: number; reason: string } | undefined;

  const post = (frame: PortFrame, transfer: ArrayBuffer[] = []) =>
    transfer.length > 0 ? port.postMessage(frame, transfer) : port.postMessage(frame);
  const flush = () => {
    if (outTexts.length === 0) return;
    // The bytes this end took ride along: no post of their own when it answers in the same turn.
    const frame: PortFrame = { k: "m", texts: outTexts, sizes: outSizes, ack: taken };
    const transfer = outTransfer;
    taken = 0;
    outTexts = [];
    outSizes = [];
    outTransfer = [];
    post(frame, transfer);
  };
  /** A standalone acknowledgement, when no message of this end carried it in time. */
  let ackTimer: NodeJS.Timeout | undefined;
  const ack = () => {
    ackTimer = undefined;
    ackScheduled = false;
    if (taken === 0 || ended) return;
    post({ k: "a", bytes: taken });
    taken = 0;
  };
  /** Bytes taken are acknowledged on this end's next message, else within ACK_DELAY_MS, or at once past ACK_BYTES. */
  const acknowledge = () => {
    if (taken >= ACK_BYTES) {
      if (!ackScheduled) {
        ackScheduled = true;
        clearTimeout(ackTimer);
        setImmediate(ack);
      }
    } else if (!ackTimer && !ackScheduled) ackTimer = setTimeout(ack, ACK_DELAY_MS).unref();
  };
  /** Hand waiting messages over, in order, until the receiver pauses. */
  const deliver = () => {
    // Held until a listener is set: the end is made before its user attaches (the dial's answer
    // comes on another port than the link's first messages).
    while (inHead < inTexts.length && !paused && listener) {
      const message = inTexts[inHead] as LinkMessage;
      taken += inSizes[inHead] as number;
      inHead += 1;
      listener?.(message);
    }
    if (inHead === inTexts.length) {
      inTexts = [];
      inSizes = [];
      inHead = 0;
    } else if (inHead > 1024 && inHead * 2 > inTexts.length) {
      inTexts = inTexts.slice(inHead);
      inSizes = inSizes.slice(inHead);
      inHead = 0;
    }
    if (taken > 0) acknowledge();
  };
  const scheduleDelivery = () => {
    if (deliveryScheduled || paused || inHead === inTexts.length) return;
    deliveryScheduled = true;
    setImmediate(() => {
      deliveryScheduled = false;
      if (!ended) deliver();
    });
  };
  /** Both ends see `close` once: what was received before it is still taken unless paused. */
  const end = (code: number, reason: string) => {
    if (ended) return;
    ended = true;
    open = false;
    if (!paused) deliver();
    inTexts = [];
    inSizes = [];
    inHead = 0;
    buffered = 0;
    port.close();
    for (const close of closes) close(code, reason);
  };

  port.on("message", (frame: PortFrame) => {
    if (ended) return;
    switch (frame.k) {
      case "m":
        buffered -= frame.ack;
        // Also after this end's own close, until the peer has taken it: what the peer sent before
        // it saw the close is still taken (a WebSocket's closing handshake).
        for (let i = 0; i < frame.texts.length; i += 1) {
          inTexts.push(frame.texts[i] as LinkMessage);
          inSizes.push(frame.sizes[i] as number);
        }
        // A port's message is already a later turn than the sender's call: taken at once unless
        // paused (or behind messages that wait).
        if (!paused) deliver();
        return;
      case "a":
        buffered -= frame.bytes;
        return;
      case "c":
        end(frame.code, frame.reason);
        return;
    }
  });
  // The port went away: after this end's own close (the peer took it and let go first), or
  // without a close frame, when the peer's thread ended.
  port.on("close", () => end(closing?.code ?? CLOSED_ABNORMALLY, closing?.reason ?? ""));

  return {
    get open() {
      return open;
    },
    get bufferedAmount() {
      return buffered;
    },
    get isPaused() {
      return paused;
    },
    send(message) {
      if (!open) return;
      const size = linkMessageBytes(message);
      buffered += size;
      if (outTexts.length === 0) queueMicrotask(flush);
      if (
        typeof message !== "string" &&
        ownsWhole(message) &&
        !outTransfer.includes(message.buffer as ArrayBuffer)
      ) {
        // Transferred, not cloned: the frame's memory moves to the other thread (the sender lets
        // go of a message it sent). A view of shared memory (a pooled Buffer) is cloned instead.
        outTransfer.push(message.buffer as ArrayBuffer);
      }
      outTexts.push(message);
      outSizes.push(size);
    },
    pause() {
      paused = true;
    },
    resume() {
      paused = false;
      if (!ended) scheduleDelivery();
    },
    close(code, reason) {
      if (!open) return;
      open = false;
      closing = { code, reason };
      flush(); // what was sent before the close goes before it
      post({ k: "c", code, reason });
      // Ends when the peer has taken the close and let go of its port (after everything it sent
      // before), or, should its thread not take it, a little later anyway.
      setTimeout(() => end(code, reason), CLOSE_GRACE_MS).unref();
    },
    onMessage(next) {
      listener = next;
      if (!ended) scheduleDelivery();
    },
    onClose(next) {
      closes.push(next);
    },
  };
}

/** Whether `bytes` is the whole of a plain ArrayBuffer, so transferring it detaches nothing else. */
function ownsWhole(bytes: Uint8Array): boolean {
  return (
    bytes.buffer instanceof ArrayBuffer &&
    bytes.byteOffset === 0 &&
    bytes.byteLength === bytes.buffer.byteLength &&
    bytes.byteLength > 0
  );
}
