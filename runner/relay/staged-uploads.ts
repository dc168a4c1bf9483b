/**
 * Uploads the server sends piece by piece over the runner link (a workspace file, a snapshot
 * import), each staged into a file of its own (0600, in a 0700 directory) until its last piece:
 * pieces in order (`seq` from 0), at most WORKSPACE_CHUNK_BYTES raw each, all for the same `key`
 * (the workspace and path, the snapshot storage); `abort` drops it, and one left without a piece
 * for `idleMs` is dropped. The commands decide what a finished upload becomes and how many may be
 * staged at once (`admit`).
 *
 * Several pieces of one upload may be in flight (UPLOAD_WINDOW_CAPABILITY, PROTOCOL.md §7): each
 * is taken in the order it arrives (its `seq` checked at once, before any await) and written
 * after the one before it, and answered once written; a failed write fails the pieces queued
 * behind it and drops the upload.
 */
import { appendFile, mkdir, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { CodedError } from "../../contracts/errors.ts";
import { WORKSPACE_CHUNK_BYTES } from "../../contracts/workspace-files.ts";

export type UploadPiece = { upload_id: string; seq: number; data: string; done: boolean; abort?: boolean };
export type Staged<K> = {
  file: string;
  key: K;
  /** The `seq` the next piece must have. */
  next: number;
  /** Bytes written to the file so far (the pieces queued behind aside). */
  size: number;
  timer: NodeJS.Timeout;
  /** Settles once the last piece taken is written (rejects when a write failed). */
  written: Promise<void>;
};

export class StagedUploads<K> {
  readonly #uploads = new Map<string, Staged<K>>();
  readonly #dir: string;
  readonly #idleMs: number;
  /** How errors name an upload ("an upload", "a snapshot upload"). */
  readonly #what: string;

  constructor(dir: string, idleMs: number, what: string) {
    this.#dir = dir;
    this.#idleMs = idleMs;
    this.#what = what;
  }

  /** The uploads staged now. */
  values(): IterableIterator<Staged<K>> {
    return this.#uploads.values();
  }

  get size(): number {
    return this.#uploads.size;
  }

  /**
   * Takes one piece of an upload for `key` (its bytes `bulk` when they came in a binary frame):
   * undefined when it aborts the upload (dropped), else the
   * staging with its size so far. `admit` runs before a new upload is counted (it throws when
   * there is no room); a piece out of order or for another key is FAILED_PRECONDITION.
   */
  async piece(c: UploadPiece, key: K, admit: () => void, bulk?: Buffer): Promise<Staged<K> | undefined> {
    const staging = this.#uploads.get(c.upload_id);
    if (c.abort) {
      if (staging) await this.drop(c.upload_id);
      return undefined;
    }
    // Raw from a binary frame (PROTOCOL.md §9), else base64 in the command.
    const data = bulk ?? Buffer.from(c.data, "base64");
    if (data.length > WORKSPACE_CHUNK_BYTES)
      throw new CodedError(
        "INVALID_ARGUMENT",
        `${this.#what} piece holds at most ${WORKSPACE_CHUNK_BYTES} bytes`,
      );
    if (c.seq === 0) {
      if (staging) await this.drop(c.upload_id);
      admit();
      const file = join(this.#dir, c.upload_id);
      // Counted before the first await: pieces of other uploads, and the next of this one, arrive meanwhile.
      const made: Staged<K> = {
        file,
        key,
        next: 1,
        size: 0,
        timer: this.#expiry(c.upload_id),
        written: Promise.resolve(),
      };
      made.written = (async () => {
        await mkdir(this.#dir, { recursive: true, mode: 0o700 });
        await writeFile(file, data, { mode: 0o600 });
        made.size += data.length;
      })();
      this.#uploads.set(c.upload_id, made);
      return this.#written(c.upload_id, made);
    }
    if (!staging || staging.next !== c.seq || JSON.stringify(staging.key) !== JSON.stringify(key))
      throw new CodedError(
        "FAILED_PRECONDITION",
        `${this.#what.replace(/^an? /, "")} ${c.upload_id} has no piece ${c.seq - 1} before piece ${c.seq}`,
      );
    staging.next += 1;
    staging.timer.refresh();
    const taken = staging;
    staging.written = staging.written.then(async () => {
      // Dropped meanwhile (an abort, the idle timer): nothing is written again.
      if (this.#uploads.get(c.upload_id) !== taken)
        throw new CodedError("ABORTED", `${this.#what} ${c.upload_id} was dropped before piece ${c.seq}`);
      await appendFile(taken.file, data);
      taken.size += data.length;
    });
    return this.#written(c.upload_id, taken);
  }

  /** `staging` once its last piece taken is written; a failed write drops the upload and is thrown. */
  async #written(uploadId: string, staging: Staged<K>): Promise<Staged<K>> {
    try {
      await staging.written;
    } catch (error) {
      if (this.#uploads.get(uploadId) === staging) await this.drop(uploadId);
      throw error;
    }
    return staging;
  }

  /** Frees the place at once; the promise settles once the staging file is gone. */
  drop(uploadId: string): Promise<void> {
    const staging = this.#uploads.get(uploadId);
    if (!staging) return Promise.resolve();
    clearTimeout(staging.timer);
    this.#uploads.delete(uploadId);
    // After the write under way, if any (a later one sees the upload gone and writes nothing).
    return staging.written
      .catch(() => undefined)
      .then(() => rm(staging.file, { force: true }))
      .catch(() => undefined);
  }

  /** Drops every staged upload (the runner stops). */
  close(): void {
    for (const id of [...this.#uploads.keys()]) void this.drop(id);
  }

  #expiry(uploadId: string): NodeJS.Timeout {
    const timer = setTimeout(() => void this.drop(uploadId), this.#idleMs);
    timer.unref();
    return timer;
  }
}
