/**
 * What the hub needs of a runner's link, whatever carries it: the runner's WebSocket, or the
 * in-process channel of `serve`'s embedded runner (contracts/runner-channel.ts). Both carry the
 * same envelopes as JSON text and are parsed, validated and accounted the same way.
 */
import type { RawData, WebSocket } from "ws";
import { CLOSED_ABNORMALLY, type LinkChannel } from "../../contracts/runner-channel.ts";

export type RunnerSocket = {
  /** Messages may be sent (a WebSocket's `OPEN`). */
  readonly open: boolean;
  /** Still open or opening: a `close` has something to close. */
  readonly closable: boolean;
  /** Send one envelope; `done` once it left (or could not). */
  send(text: string, done: (error?: Error) => void): void;
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
    send: (text, done) => ws.send(text, done),
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
  channel.onMessage((text) => events.message(text, false));
  channel.onClose((code) => events.close(code));
  return {
    get open() {
      return channel.open;
    },
    get closable() {
      return channel.open;
    },
    send: (text, done) => {
      channel.send(text);
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
