/**
 * Uploads the server sends piece by piece over the runner link (a workspace file, a snapshot
 * import), each staged into a file of its own (0600, in a 0700 directory) until its last piece:
 * pieces in order (`seq` from 0), at most WORKSPACE_CHUNK_BYTES raw each, all for the same `key`
 * (the workspace and path, the snapshot storage); `abort` drops it, and one left without a piece
 * for `idleMs` is dropped. The commands decide what a finished upload becomes and how many may be
 * staged at once (`admit`).
 */
import { appendFile, mkdir, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { CodedError } from "../../contracts/errors.ts";
import { WORKSPACE_CHUNK_BYTES } from "../../contracts/workspace-files.ts";

export type UploadPiece = { upload_id: string; seq: number; data: string; done: boolean; abort?: boolean };
export type Staged<K> = { file: string; key: K; next: number; size: number; timer: NodeJS.Timeout };

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
    let staging = this.#uploads.get(c.upload_id);
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
      // Counted before the first await: pieces of other uploads arrive meanwhile.
      staging = { file, key, next: 1, size: data.length, timer: this.#expiry(c.upload_id) };
      this.#uploads.set(c.upload_id, staging);
      try {
        await mkdir(this.#dir, { recursive: true, mode: 0o700 });
        await writeFile(file, data, { mode: 0o600 });
      } catch (error) {
        await this.drop(c.upload_id);
        throw error;
      }
      return staging;
    }
    if (!staging || staging.next !== c.seq || JSON.stringify(staging.key) !== JSON.stringify(key))
      throw new CodedError(
        "FAILED_PRECONDITION",
        `${this.#what.replace(/^an? /, "")} ${c.upload_id} has no piece ${c.seq - 1} before piece ${c.seq}`,
      );
    await appendFile(staging.file, data);
    staging.next += 1;
    staging.size += data.length;
    staging.timer.refresh();
    return staging;
  }

  /** Frees the place at once; the promise settles once the staging file is gone. */
  drop(uploadId: string): Promise<void> {
    const staging = this.#uploads.get(uploadId);
    if (!staging) return Promise.resolve();
    clearTimeout(staging.timer);
    this.#uploads.delete(uploadId);
    return rm(staging.file, { force: true }).catch(() => undefined);
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
