/** The runner link on the wire (PROTOCOL.md §1, §6): close codes, envelope parsing, refusals. */
import { STATUS_CODES } from "node:http";
import type { Duplex } from "node:stream";
import type { RawData } from "ws";
import { type ApiErrorBody, describeZodError, httpStatusOf } from "../../contracts/errors.ts";
import { RunnerToServer } from "../../contracts/runner-protocol.ts";

/** WebSocket close codes of the runner link (PROTOCOL.md §6). */
export const CloseCodes = {
  /** The server is shutting down: reconnect with backoff. */
  goingAway: 1001,
  /** An envelope that does not validate before `hello`. */
  policyViolation: 1008,
  /** The server failed to attach the runner (e.g. its store was unavailable): redial. */
  internalError: 1011,
  /** A newer connection of the same runner took over. */
  superseded: 4000,
  /**
   * The link may not speak as the runner its `hello` names: the name is bound to another
   * credential, or the link's credential was revoked. The runner holding the name is untouched.
   */
  identityRefused: 4003,
  /** The first message was not a valid `hello` (or none came in time). */
  helloExpected: 4002,
} as const;

export type ParsedEnvelope =
  | { ok: true; envelope: RunnerToServer }
  | { ok: false; reason: string; commandId?: string | undefined };

/** One message as received: a WebSocket's data, or the in-process channel's text. */
export function parseEnvelope(data: RawData | string, isBinary: boolean): ParsedEnvelope {
  if (isBinary) return { ok: false, reason: "binary messages are not part of the protocol" };
  let json: unknown;
  try {
    json = JSON.parse(rawText(data));
  } catch {
    return { ok: false, reason: "not JSON" };
  }
  const parsed = RunnerToServer.safeParse(json);
  if (parsed.success) return { ok: true, envelope: parsed.data };
  const payload = (json as { type?: unknown; payload?: { command_id?: unknown } } | null) ?? {};
  const commandId =
    payload.type === "result" && typeof payload.payload?.command_id === "string"
      ? payload.payload.command_id
      : undefined;
  return { ok: false, reason: describeZodError(parsed.error), commandId };
}

/** Size of a message as received, in bytes. */
export function rawByteLength(data: RawData | string): number {
  if (typeof data === "string") return Buffer.byteLength(data);
  if (Array.isArray(data)) return data.reduce((n, b) => n + b.length, 0);
  return data.byteLength;
}

function rawText(data: RawData | string): string {
  if (typeof data === "string") return data;
  if (Array.isArray(data)) return Buffer.concat(data).toString("utf8");
  if (data instanceof ArrayBuffer) return Buffer.from(data).toString("utf8");
  return data.toString("utf8");
}

/** Refuse an upgrade with a plain HTTP response carrying the usual `{code, message}` body. */
export function rejectUpgrade(socket: Duplex, error: ApiErrorBody): void {
  const status = httpStatusOf[error.code];
  const body = JSON.stringify(error);
  const headers = [
    `HTTP/1.1 ${status} ${STATUS_CODES[status] ?? ""}`,
    "Content-Type: application/json",
    `Content-Length: ${Buffer.byteLength(body)}`,
    "Connection: close",
  ];
  if (error.code === "UNAUTHENTICATED")
    headers.push('WWW-Authenticate: Bearer realm="agent-sessions runner"');
  socket.end(`${headers.join("\r\n")}\r\n\r\n${body}`);
}
