/**
 * What `serve`'s server thread and its embedded runner's thread (./worker.ts) say to each other
 * besides the runner link itself, which has a port of its own per dial
 * (contracts/runner-port-channel.ts).
 */
import type { MessagePort } from "node:worker_threads";
import { CodedError, type ErrorCode, type ApiErrorBody } from "../../contracts/errors.ts";

export type ToServerThread =
  /** The runner dials: `port` is the server's end of the link, admitted or closed. */
  | { type: "dial"; id: number; bearer: string; port: MessagePort }
  /** The runner is up (its link dialed, as `startRunner` returns). */
  | { type: "started" }
  /** The runner could not start: why, for `serve` to exit with (issue 34 item 2). */
  | { type: "failed"; error: Thrown };

export type FromServerThread =
  | { type: "dialed"; id: number; ok: true }
  | { type: "dialed"; id: number; ok: false; status: number; error: ApiErrorBody }
  /** Stop the runner and end the thread. */
  | { type: "stop" };

/** An error as data across threads: its message and, for a CodedError, its code. */
export type Thrown = { message: string; code?: ErrorCode | undefined };

export function thrownOf(error: unknown): Thrown {
  if (error instanceof CodedError) return { message: error.message, code: error.code };
  return { message: error instanceof Error ? error.message : String(error) };
}

/** The error again, on the server's thread. */
export function errorOf(thrown: Thrown): Error {
  return thrown.code ? new CodedError(thrown.code, thrown.message) : new Error(thrown.message);
}
