/**
 * A download relayed to the server in pieces of at most WORKSPACE_CHUNK_BYTES bytes each (binary
 * frames, or base64 `relay_chunk`s for a server without them: the sink decides; PROTOCOL.md), paced by the link's send buffer: above the high-water mark the source
 * is not read. Past `maxBytes` it stops with RESOURCE_EXHAUSTED; `signal` (the command's deadline
 * or the server's cancel) stops it too. Used by workspace reads and snapshot reads.
 */
import { setTimeout as sleep } from "node:timers/promises";
import { CodedError } from "../../contracts/errors.ts";
import { WORKSPACE_CHUNK_BYTES } from "../../contracts/workspace-files.ts";

/** Bytes waiting in the link's socket above which a download waits. */
const SEND_HIGH_WATER_BYTES = 4 * 1024 * 1024;

export type ChunkSink = {
  /** One piece (the sink owns it from here) and whether it is the last. */
  chunk(data: Buffer, done: boolean): void;
  buffered(): number;
};

/** Sends `source` through `sink` to its end (a last empty chunk with `done`); resolves with its bytes. */
export async function sendChunked(
  source: AsyncIterable<Buffer>,
  maxBytes: number,
  sink: ChunkSink,
  signal?: AbortSignal,
): Promise<number> {
  const aborted = new Promise<never>((_, reject) => {
    if (signal?.aborted) reject(signal.reason);
    signal?.addEventListener("abort", () => reject(signal.reason), { once: true });
  });
  aborted.catch(() => {}); // raced below; unhandled only when nothing waits any more
  let size = 0;
  let pending: Buffer[] = [];
  let pendingBytes = 0;
  const flush = async () => {
    if (pendingBytes === 0) return;
    while (sink.buffered() > SEND_HIGH_WATER_BYTES) {
      signal?.throwIfAborted();
      await sleep(5);
    }
    sink.chunk(pending.length === 1 ? (pending[0] as Buffer) : Buffer.concat(pending), false);
    pending = [];
    pendingBytes = 0;
  };
  const iterator = source[Symbol.asyncIterator]();
  try {
    for (;;) {
      const next = await Promise.race([iterator.next(), aborted]);
      if (next.done) break;
      let chunk = next.value;
      size += chunk.length;
      if (size > maxBytes)
        throw new CodedError("RESOURCE_EXHAUSTED", `the download exceeds the limit of ${maxBytes} bytes`, {
          limit_bytes: maxBytes,
        });
      while (chunk.length > 0) {
        const room = WORKSPACE_CHUNK_BYTES - pendingBytes;
        pending.push(chunk.subarray(0, room));
        pendingBytes += Math.min(room, chunk.length);
        chunk = chunk.subarray(room);
        if (pendingBytes >= WORKSPACE_CHUNK_BYTES) await flush();
      }
    }
    await flush();
    sink.chunk(Buffer.alloc(0), true);
    return size;
  } finally {
    // Aborted, the source may be stuck inside a read its engine is ending: not waited for.
    if (signal?.aborted) iterator.return?.()?.catch(() => {});
    else await iterator.return?.();
  }
}
