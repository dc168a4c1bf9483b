/**
 * Binary frames of the runner link (proxy/PROTOCOL.md §9): bulk bytes (a download's pieces, an
 * upload's pieces) as raw bytes beside the JSON envelopes, instead of base64 inside them. Used
 * only when both ends said so (`capabilities` in `hello` and `welcome`); otherwise the same bytes
 * go as base64 in `relay_chunk` and `workspace_write`/`snapshot_write` as before.
 *
 * A frame is a fixed header, the id it belongs to, then the bytes:
 *
 *   byte 0   RUNNER_PROTOCOL_VERSION (1)
 *   byte 1   kind: 1 relay chunk (runner → server, `id` a relay id), 2 command data (server →
 *            runner, `id` the command id of the `command` that follows it)
 *   byte 2   flags: bit 0 `done` (a relay chunk's last); the other bits 0
 *   byte 3   n, the id's length in bytes (1..BINARY_ID_MAX_BYTES)
 *   3+1..n   the id, ASCII letters, digits, `-` and `_`
 *   rest     the bytes, at most WORKSPACE_CHUNK_BYTES
 *
 * On a WebSocket a frame is one binary message; on the in-process and worker-port channels
 * (contracts/runner-channel.ts, contracts/runner-port-channel.ts) a Uint8Array handed over as it
 * is (the port transfers its buffer when the frame owns it whole). Depends on nothing but the
 * contracts.
 */
import { RUNNER_PROTOCOL_VERSION } from "./runner-protocol.ts";
import { WORKSPACE_CHUNK_BYTES } from "./workspace-files.ts";

/** What a runner or a server announces when it takes and sends binary frames. */
export const BINARY_FRAMES_CAPABILITY = "binary_frames";

/** The longest id a frame names (a UUID is 36). */
export const BINARY_ID_MAX_BYTES = 64;

export const BinaryKind = { relayChunk: 1, commandData: 2 } as const;
export type BinaryKind = (typeof BinaryKind)[keyof typeof BinaryKind];

export type BinaryFrame = { kind: BinaryKind; id: string; done: boolean; data: Buffer };

const ID = /^[A-Za-z0-9_-]+$/;
const HEADER_BYTES = 4;

/**
 * One frame as one Buffer of its own (never a slice of a shared pool: a worker port may transfer
 * its memory). Throws on an id or data that a receiver would refuse: a sender's bug.
 */
export function encodeBinaryFrame(kind: BinaryKind, id: string, data: Uint8Array, done = false): Buffer {
  if (id.length === 0 || id.length > BINARY_ID_MAX_BYTES || !ID.test(id))
    throw new Error(
      `a binary frame's id must be 1..${BINARY_ID_MAX_BYTES} of [A-Za-z0-9_-], got ${JSON.stringify(id)}`,
    );
  if (data.length > WORKSPACE_CHUNK_BYTES)
    throw new Error(`a binary frame holds at most ${WORKSPACE_CHUNK_BYTES} bytes, got ${data.length}`);
  const frame = Buffer.allocUnsafeSlow(HEADER_BYTES + id.length + data.length);
  frame[0] = RUNNER_PROTOCOL_VERSION;
  frame[1] = kind;
  frame[2] = done ? 1 : 0;
  frame[3] = id.length;
  frame.write(id, HEADER_BYTES, "latin1");
  frame.set(data, HEADER_BYTES + id.length);
  return frame;
}

export type ParsedBinaryFrame = { ok: true; frame: BinaryFrame } | { ok: false; reason: string };

/** A received frame checked field by field; `data` is a view of `bytes`, not a copy. */
export function decodeBinaryFrame(bytes: Uint8Array): ParsedBinaryFrame {
  const fail = (reason: string): ParsedBinaryFrame => ({ ok: false, reason: `binary frame: ${reason}` });
  if (bytes.length < HEADER_BYTES + 1) return fail(`${bytes.length} bytes, shorter than a header`);
  if (bytes[0] !== RUNNER_PROTOCOL_VERSION)
    return fail(`version ${bytes[0]}, not ${RUNNER_PROTOCOL_VERSION}`);
  const kind = bytes[1];
  if (kind !== BinaryKind.relayChunk && kind !== BinaryKind.commandData) return fail(`unknown kind ${kind}`);
  const flags = bytes[2] as number;
  if ((flags & ~1) !== 0) return fail(`unknown flags ${flags}`);
  if (kind === BinaryKind.commandData && flags !== 0) return fail("command data carries no flags");
  const idLength = bytes[3] as number;
  if (idLength === 0 || idLength > BINARY_ID_MAX_BYTES) return fail(`id length ${idLength}`);
  if (bytes.length < HEADER_BYTES + idLength) return fail("cut short inside its id");
  const buffer = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const id = buffer.toString("latin1", HEADER_BYTES, HEADER_BYTES + idLength);
  if (!ID.test(id)) return fail("its id is not [A-Za-z0-9_-]");
  const data = buffer.subarray(HEADER_BYTES + idLength);
  if (data.length > WORKSPACE_CHUNK_BYTES)
    return fail(`${data.length} bytes of data, more than ${WORKSPACE_CHUNK_BYTES}`);
  return { ok: true, frame: { kind, id, done: flags === 1, data } };
}
