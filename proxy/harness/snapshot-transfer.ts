import { randomUUID } from "node:crypto";
import { type Readable, Writable } from "node:stream";
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

/**
 * An import's checked, re-written tar (proxy/harness/snapshot-archive.ts) sent to `runner` while
 * it is made: `sink` takes the tar; each full piece of WORKSPACE_CHUNK_BYTES goes as a
 * `snapshot_write`, up to the runner's upload window of them in flight (UPLOAD_WINDOW_PIECES to a
 * runner that announced it on this replica's link, else 1: each answered before the next). The
 * sink takes more while the window has room, so the archive's checks go on while the runner
 * stages what came before; a full window holds them back (the link paces the checks). The last
 * piece is held back until `finish`, which the caller calls once the whole archive was checked and
 * its record made, and which goes after every other piece was answered: the runner stages the
 * pieces and makes the storage only on that last one, so an archive refused on the way makes
 * nothing (`abort` drops what the runner staged).
 */
export class SnapshotUpload {
  readonly sink: Writable;
  readonly #link: SnapshotLink;
  readonly #runner: RunnerRecord;
  readonly #target: SnapshotStorage;
  readonly #uploadId = randomUUID();
  readonly #window: number;
  #pending: Buffer[] = [];
  #pendingBytes = 0;
  /** Pieces sent so far (the next one's `seq`). */
  #seq = 0;
  /** The pieces on their way, each settling (never rejecting) once answered: an abort goes after them. */
  readonly #inFlight = new Set<Promise<void>>();
  /** The first piece the runner refused (or the link lost): no more go, and it is told. */
  #failure: unknown;

  constructor(link: SnapshotLink, runner: RunnerRecord, target: SnapshotStorage) {
    this.#link = link;
    this.#runner = runner;
    this.#target = target;
    this.#window = Math.max(1, link.uploadWindow?.(runner.runner_id) ?? 1);
    this.sink = new Writable({
      highWaterMark: WORKSPACE_CHUNK_BYTES,
      write: (chunk: Buffer, _encoding, callback) => {
        this.#pending.push(chunk);
        this.#pendingBytes += chunk.length;
        this.#sendFull().then(() => callback(), callback);
      },
    });
  }

  /** Sends the last piece (what is pending, possibly nothing) with `done`; the storage's size in bytes. */
  async finish(): Promise<number> {
    await this.#answered();
    const outcome = await this.#send(this.#take(this.#pendingBytes), true);
    return (outcome as { size_bytes?: number }).size_bytes ?? 0;
  }

  /** Drops what the runner staged of this upload, if it got anything (never throws). */
  async abort(): Promise<void> {
    this.sink.destroy();
    await Promise.all([...this.#inFlight]);
    if (this.#seq === 0) return;
    await this.#link
      .command(this.#runner.runner_id, { ...this.#piece(this.#seq, false), abort: true } as RunnerCommand)
      .catch(() => undefined);
  }

  async #sendFull(): Promise<void> {
    while (this.#pendingBytes >= WORKSPACE_CHUNK_BYTES) {
      while (this.#inFlight.size >= this.#window) await Promise.race(this.#inFlight);
      if (this.#failure !== undefined) throw this.#failure;
      const sending: Promise<void> = this.#send(this.#take(WORKSPACE_CHUNK_BYTES), false).then(
        () => {
          this.#inFlight.delete(sending);
        },
        (error: unknown) => {
          this.#failure ??= error;
          this.#inFlight.delete(sending);
        },
      );
      this.#inFlight.add(sending);
    }
    if (this.#failure !== undefined) throw this.#failure;
  }

  /** Every piece sent so far answered; the first refusal thrown. */
  async #answered(): Promise<void> {
    await Promise.all([...this.#inFlight]);
    if (this.#failure !== undefined) throw this.#failure;
  }

  /** The first `n` pending bytes as one buffer. */
  #take(n: number): Buffer {
    const all = this.#pending.length === 1 ? (this.#pending[0] as Buffer) : Buffer.concat(this.#pending);
    this.#pending = all.length > n ? [all.subarray(n)] : [];
    this.#pendingBytes = all.length - n;
    return all.subarray(0, n);
  }

  #piece(seq: number, done: boolean): RunnerCommand {
    return {
      kind: "snapshot_write",
      target: this.#target,
      upload_id: this.#uploadId,
      seq,
      data: "",
      done,
    };
  }

  /** One piece; its bytes go beside the command (`bulk`): raw in a binary frame, or base64 for an older runner. */
  async #send(data: Buffer, done: boolean): Promise<unknown> {
    // Numbered as it leaves: pieces in flight reach the runner in this order (the link keeps it).
    const seq = this.#seq++;
    const outcome = await this.#link.command(
      this.#runner.runner_id,
      this.#piece(seq, done),
      WRITE_TIMEOUT_MS,
      data,
    );
    if (!outcome.ok)
      throw new CodedError(
        outcome.error.code,
        `importing the snapshot on runner ${this.#runner.runner_name} failed: ${outcome.error.message}; nothing was kept`,
        outcome.error.details,
      );
    return outcome.result;
  }
}
