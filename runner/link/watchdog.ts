/**
 * PROTOCOL.md §4 from the runner's side: a server that says nothing for 3 heartbeat intervals (it
 * pings every interval) is presumed gone, and the link is dropped so the runner redials. Without
 * this, a runner whose server vanished without closing the connection (a host that lost power, a
 * network partition: no FIN, no RST) would wait on a dead socket for as long as TCP lets it.
 * Three is one more than the server allows its runners: a busy server's ping may come most of an
 * interval late without the server seeing a stall of its own, and the runner must not be the side
 * that gives up first. As on the server, only time this process ran counts: a tick more than an
 * interval late moves the last-heard time on by the stall (contracts/awake-deadline.ts).
 */
import { stalledTick } from "../../contracts/awake-deadline.ts";

/** Intervals without a word from the server before the link is dropped. */
export const SILENT_INTERVALS = 3;

export class LinkWatchdog {
  readonly #intervalMs: number;
  readonly #onSilent: (silentMs: number) => void;
  readonly #now: () => number;
  readonly #timer: NodeJS.Timeout;
  #lastHeard: number;
  #lastTick: number;

  /** Starts watching: `onSilent` is called once, after 3 silent intervals; then it stops. */
  constructor(intervalMs: number, onSilent: (silentMs: number) => void, now: () => number = Date.now) {
    this.#intervalMs = intervalMs;
    this.#onSilent = onSilent;
    this.#now = now;
    this.#lastHeard = this.#lastTick = now();
    this.#timer = setInterval(() => this.#tick(), intervalMs);
    this.#timer.unref();
  }

  /** The server said something. */
  heard(): void {
    this.#lastHeard = this.#now();
  }

  stop(): void {
    clearInterval(this.#timer);
  }

  #tick(): void {
    const now = this.#now();
    this.#lastHeard += stalledTick(this.#lastTick, now, this.#intervalMs);
    this.#lastTick = now;
    const silent = now - this.#lastHeard;
    if (silent < SILENT_INTERVALS * this.#intervalMs) return;
    this.stop();
    this.#onSilent(silent);
  }
}
