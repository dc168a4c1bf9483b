/**
 * The runner's side of snapshots (the `snapshot_*` commands, contracts/runner-protocol.ts; issue
 * 38). A take holds the workspace's relays (runner/relay/snapshot-gate.ts) while the engine copies
 * its volume, so the copy falls between two requests; a read streams the snapshot's tar as
 * `relay_chunk`s paced by the link (runner/relay/chunked-download.ts); an import arrives as
 * ordered pieces staged in a file under the runner's data directory and becomes the storage at
 * once when the last piece came (a broken upload makes nothing on the engine).
 */
import { createReadStream } from "node:fs";
import { appendFile, mkdir, rm, stat, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { CodedError } from "../../contracts/errors.ts";
import type { RunnerCommand } from "../../contracts/runner-protocol.ts";
import { WORKSPACE_CHUNK_BYTES } from "../../contracts/workspace-files.ts";
import type { SessionSnapshots } from "../engine/driver.ts";
import { type ChunkSink, sendChunked } from "./chunked-download.ts";
import type { SnapshotGate } from "./snapshot-gate.ts";
import { DEFAULT_UPLOAD_LIMITS, type UploadLimits } from "./workspace-commands.ts";

type Of<K extends RunnerCommand["kind"]> = Extract<RunnerCommand, { kind: K }>;

type Staging = { file: string; storage: string; next: number; size: number; timer: NodeJS.Timeout };

export class SnapshotCommands {
  readonly #snapshots: SessionSnapshots | undefined;
  readonly #gate: SnapshotGate;
  readonly #dir: string;
  readonly #limits: UploadLimits;
  readonly #uploads = new Map<string, Staging>();

  /** `stagingDir`: where imports are staged (`<data-dir>/snapshot-uploads`). */
  constructor(
    snapshots: SessionSnapshots | undefined,
    gate: SnapshotGate,
    stagingDir: string,
    limits: UploadLimits = DEFAULT_UPLOAD_LIMITS,
  ) {
    this.#snapshots = snapshots;
    this.#gate = gate;
    this.#dir = stagingDir;
    this.#limits = limits;
  }

  #engine(kind: RunnerCommand["kind"]): SessionSnapshots {
    if (!this.#snapshots)
      throw new CodedError("UNIMPLEMENTED", `this runner's engine has no snapshots (${kind})`);
    return this.#snapshots;
  }

  /**
   * Relays that arrive wait from now; those in flight are waited for up to `quiesce_ms` (else
   * ABORTED, nothing made); then the engine copies. The workload is left as it is (running,
   * paused or scaled to 0). `signal`: the command's deadline or cancel stops the copy.
   */
  async take(c: Of<"snapshot_take">, signal?: AbortSignal): Promise<Record<string, unknown>> {
    const engine = this.#engine(c.kind);
    const release = await this.#gate.hold(c.container_name, c.quiesce_ms, signal);
    try {
      const { sizeBytes } = await engine.take(c.container_name, c.target, signal);
      return { size_bytes: sizeBytes };
    } finally {
      release();
    }
  }

  async delete(c: Of<"snapshot_delete">): Promise<Record<string, unknown>> {
    return { deleted: await this.#engine(c.kind).remove(c.target) };
  }

  async read(
    c: Of<"snapshot_read">,
    sink: ChunkSink,
    signal?: AbortSignal,
  ): Promise<Record<string, unknown>> {
    const source = await this.#engine(c.kind).read(c.target, c.max_bytes, signal);
    return { size: await sendChunked(source, c.max_bytes, sink, signal) };
  }

  async restore(c: Of<"snapshot_restore">): Promise<Record<string, unknown>> {
    await this.#engine(c.kind).restore(c.container_name, c.source);
    return {};
  }

  async write(c: Of<"snapshot_write">): Promise<Record<string, unknown>> {
    const engine = this.#engine(c.kind);
    let staging = this.#uploads.get(c.upload_id);
    if (c.abort) {
      if (staging) await this.#drop(c.upload_id, staging);
      return { size: 0 };
    }
    const data = Buffer.from(c.data, "base64");
    if (data.length > WORKSPACE_CHUNK_BYTES)
      throw new CodedError(
        "INVALID_ARGUMENT",
        `a snapshot upload piece holds at most ${WORKSPACE_CHUNK_BYTES} bytes`,
      );
    if (c.seq === 0) {
      if (staging) await this.#drop(c.upload_id, staging);
      this.#admit();
      const file = join(this.#dir, c.upload_id);
      // Counted before the first await: pieces of other uploads arrive meanwhile.
      staging = {
        file,
        storage: c.target.storage,
        next: 1,
        size: data.length,
        timer: this.#expiry(c.upload_id),
      };
      this.#uploads.set(c.upload_id, staging);
      try {
        await mkdir(this.#dir, { recursive: true, mode: 0o700 });
        await writeFile(file, data, { mode: 0o600 });
      } catch (error) {
        await this.#drop(c.upload_id, staging);
        throw error;
      }
    } else {
      if (!staging || staging.next !== c.seq || staging.storage !== c.target.storage)
        throw new CodedError(
          "FAILED_PRECONDITION",
          `snapshot upload ${c.upload_id} has no piece ${c.seq - 1} before piece ${c.seq}`,
        );
      await appendFile(staging.file, data);
      staging.next += 1;
      staging.size += data.length;
      staging.timer.refresh();
    }
    if (!c.done) return { size: staging.size };
    try {
      const file = staging.file;
      const size = (await stat(file)).size;
      const { sizeBytes } = await engine.write(c.target, { size, open: () => createReadStream(file) });
      return { size, size_bytes: sizeBytes };
    } finally {
      await this.#drop(c.upload_id, staging);
    }
  }

  /** Room for one more staged import, or RESOURCE_EXHAUSTED naming the bound. */
  #admit(): void {
    const { uploadsMax, uploadIdleMs } = this.#limits;
    if (this.#uploads.size >= uploadsMax)
      throw new CodedError(
        "RESOURCE_EXHAUSTED",
        `this runner stages ${uploadsMax} snapshot imports at most at once (AGENT_SESSIONS_RUNNER_UPLOADS_MAX); retry once one finishes (a stalled one is dropped after ${Math.round(uploadIdleMs / 1000)} s without a piece)`,
        { limit: uploadsMax, setting: "AGENT_SESSIONS_RUNNER_UPLOADS_MAX" },
      );
  }

  /** Drops every staged import (the runner stops). */
  close(): void {
    for (const [id, s] of this.#uploads) void this.#drop(id, s);
  }

  #expiry(uploadId: string): NodeJS.Timeout {
    const timer = setTimeout(() => {
      const s = this.#uploads.get(uploadId);
      if (s) void this.#drop(uploadId, s);
    }, this.#limits.uploadIdleMs);
    timer.unref();
    return timer;
  }

  #drop(uploadId: string, staging: Staging): Promise<void> {
    clearTimeout(staging.timer);
    this.#uploads.delete(uploadId);
    return rm(staging.file, { force: true }).catch(() => undefined);
  }
}
