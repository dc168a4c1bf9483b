/**
 * What the hub needs of a runner's link, whatever carries it: the runner's WebSocket, or the
 * in-process channel of `serve`'s embedded runner (contracts/runner-channel.ts). Both carry the
 * same envelopes as JSON text (and binary frames as bytes) and are parsed, validated and
 * accounted the same way.
 */
import type { RawData, WebSocket } from "ws";
import { CLOSED_ABNORMALLY, type LinkChannel, type LinkMessage } from "../../contracts/runner-channel.ts";

export type RunnerSocket = {
  /** Messages may be sent (a WebSocket's `OPEN`). */
  readonly open: boolean;
  /** Still open or opening: a `close` has something to close. */
  readonly closable: boolean;
  /**
   * Send one envelope (text) or binary frame (bytes, contracts/runner-binary.ts; let go of once
   * sent); `done` once it left (or could not).
   */
  send(message: LinkMessage, done: (error?: Error) => void): void;
  close(code: number, reason: string): void;
  /** End it at once, no close handshake (a peer presumed dead). */
  terminate(): void;
  /** Stop / resume reading (backpressure to the runner: PROTOCOL.md §8). */
  pause(): void;
  resume(): void;
  readonly isPaused: boolean;
};

/** What the hub is told of one link. */
export type RunnerSocketEvents = {
  message(data: RawData | string, isBinary: boolean): void;
  error(error: Error): void;
  close(code: number): void;
};

export function webSocketRunnerSocket(ws: WebSocket, events: RunnerSocketEvents): RunnerSocket {
  ws.on("message", events.message);
  ws.on("error", events.error);
  ws.on("close", events.close);
  return {
    get open() {
      return ws.readyState === ws.OPEN;
    },
    get closable() {
      return ws.readyState === ws.OPEN || ws.readyState === ws.CONNECTING;
    },
    send: (message, done) => ws.send(message, { binary: typeof message !== "string" }, done),
    close: (code, reason) => ws.close(code, reason),
    terminate: () => ws.terminate(),
    pause: () => ws.pause(),
    resume: () => ws.resume(),
    get isPaused() {
      return ws.isPaused;
    },
  };
}

export function channelRunnerSocket(channel: LinkChannel, events: RunnerSocketEvents): RunnerSocket {
  channel.onMessage((message) =>
    typeof message === "string"
      ? events.message(message, false)
      : events.message(Buffer.from(message.buffer, message.byteOffset, message.byteLength), true),
  );
  channel.onClose((code) => events.close(code));
  return {
    get open() {
      return channel.open;
    },
    get closable() {
      return channel.open;
    },
    send: (message, done) => {
      channel.send(message);
      done();
    },
    close: (code, reason) => channel.close(code, reason),
    terminate: () => channel.close(CLOSED_ABNORMALLY, ""),
    pause: () => channel.pause(),
    resume: () => channel.resume(),
    get isPaused() {
      return channel.isPaused;
    },
  };
}
