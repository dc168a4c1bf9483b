import { randomUUID } from "node:crypto";
import { open, stat } from "node:fs/promises";
import type { Readable } from "node:stream";
import { CodedError } from "../../contracts/errors.ts";
import type { RunnerCommand } from "../../contracts/runner-protocol.ts";
import {
  SESSION_SNAPSHOT_KIND,
  SNAPSHOT_ARCHIVE_FORMAT,
  type SessionSnapshot,
  type SnapshotStorage,
} from "../../contracts/session-snapshot.ts";
import { WORKSPACE_CHUNK_BYTES } from "../../contracts/workspace-files.ts";
import { chunkBytes } from "../lifecycle/runner-directory.ts";
import type { RunnerRecord } from "../store/store.ts";
import type { SnapshotLink } from "./session-snapshots.ts";
import { adaptiveGzip } from "./adaptive-gzip.ts";
import { manifestEntry } from "./snapshot-archive.ts";
import { snapshotTarget } from "./snapshot-target.ts";

/** How long the runner may take to stream a snapshot, or to extract one. */
const TRANSFER_TIMEOUT_MS = 15 * 60_000;
/** How long one piece of an import (or its last, which extracts it) may take. */
const WRITE_TIMEOUT_MS = 10 * 60_000;

/**
 * A snapshot's archive as a gzip stream (`GET …/archive`): `manifest.json` first, then the
 * runner's tar (`snapshot_read` from `runnerId`, entries under `volume/`) as its chunks arrive.
 * Resolves once the first chunk came; a failure before it is thrown (RESOURCE_EXHAUSTED with
 * `limit_bytes`: past `maxBytes`), one after it cuts the stream short.
 */
export async function streamSnapshotArchive(
  link: SnapshotLink,
  snapshot: SessionSnapshot,
  runnerId: string,
  maxBytes: number,
): Promise<Readable> {
  // The fastest level, and stored blocks where the bytes look incompressible (adaptive-gzip.ts):
  // the export is paced by this process's CPU (measured: the default level and zlib's 16 KiB
  // pieces made ~3,000 pieces and 1.75 s of server CPU for 50 MB; level 1 throughout 0.48 s, of
  // which the random half ~0.45 s for no gain; adaptive 0.11 s).
  const compressed = adaptiveGzip();
  const gzip = compressed.stream;
  compressed.write(
    manifestEntry({
      format: SNAPSHOT_ARCHIVE_FORMAT,
      source: {
        namespace: snapshot.metadata.namespace,
        name: snapshot.metadata.name,
        ...(snapshot.status.engine ? { engine: snapshot.status.engine } : {}),
      },
      spec: snapshot.spec,
      sizeBytes: snapshot.status.sizeBytes ?? 0,
      createdAt: snapshot.metadata.creationTimestamp,
    }),
  );
  const relayId = randomUUID();
  let ended = false;
  const end = (error?: Error) => {
    if (ended) return;
    ended = true;
    compressed.end(error);
  };
  let started: (value: "chunk") => void = () => {};
  const firstChunk = new Promise<"chunk">((resolve) => {
    started = resolve;
  });
  const unsubscribe = link.onRelayChunk(relayId, (chunk) => {
    if (ended) return;
    started("chunk");
    const bytes = chunkBytes(chunk);
    if (bytes.length > 0) compressed.write(bytes);
    if (chunk.done) end();
  });
  const outcome = link
    .command(
      runnerId,
      {
        kind: "snapshot_read",
        target: snapshotTarget(snapshot),
        relay_id: relayId,
        max_bytes: maxBytes,
      },
      TRANSFER_TIMEOUT_MS,
    )
    .finally(unsubscribe);
  const first = await Promise.race([firstChunk, outcome]);
  if (first !== "chunk" && !first.ok) {
    end(new Error(first.error.message));
    const { code, message } = first.error;
    throw new CodedError(
      code,
      `exporting ${SESSION_SNAPSHOT_KIND} ${snapshot.metadata.namespace}/${snapshot.metadata.name} failed: ${message}`,
      code === "RESOURCE_EXHAUSTED" ? { limit_bytes: maxBytes } : first.error.details,
    );
  }
  void outcome.then((o) => end(o.ok ? undefined : new Error(o.error.message)));
  return gzip;
}

/** The staged, checked tar at `path` to `runner` in pieces of WORKSPACE_CHUNK_BYTES (`snapshot_write`); the storage's size in bytes. */
export async function sendStagedSnapshot(
  link: SnapshotLink,
  runner: RunnerRecord,
  target: SnapshotStorage,
  path: string,
): Promise<number> {
  const uploadId = randomUUID();
  const size = (await stat(path)).size;
  const file = await open(path, "r");
  // The bytes go beside the command (`bulk`): raw in a binary frame, or base64 for an older runner.
  const piece = (seq: number, done: boolean): RunnerCommand => ({
    kind: "snapshot_write",
    target,
    upload_id: uploadId,
    seq,
    data: "",
    done,
  });
  let seq = 0;
  // The next piece is read while the runner stores this one.
  const read = async (at: number) => {
    const buffer = Buffer.allocUnsafeSlow(Math.min(WORKSPACE_CHUNK_BYTES, Math.max(0, size - at)));
    const { bytesRead } = await file.read(buffer, 0, buffer.length, at);
    return buffer.subarray(0, bytesRead);
  };
  let next = read(0);
  try {
    let offset = 0;
    for (;;) {
      const data = await next;
      offset += data.length;
      const done = offset >= size;
      if (!done) next = read(offset);
      const outcome = await link.command(runner.runner_id, piece(seq, done), WRITE_TIMEOUT_MS, data);
      seq += 1;
      if (!outcome.ok)
        throw new CodedError(
          outcome.error.code,
          `importing the snapshot on runner ${runner.runner_name} failed: ${outcome.error.message}; nothing was kept`,
          outcome.error.details,
        );
      if (done) return (outcome.result as { size_bytes?: number }).size_bytes ?? size;
    }
  } catch (error) {
    if (seq > 0)
      await link
        .command(runner.runner_id, { ...piece(seq, false), abort: true } as RunnerCommand)
        .catch(() => undefined);
    throw error;
  } finally {
    await next.catch(() => undefined);
    await file.close();
  }
}
