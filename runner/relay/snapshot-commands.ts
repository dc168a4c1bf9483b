/**
 * The runner's side of snapshots (the `snapshot_*` commands, contracts/runner-protocol.ts; issue
 * 38). A take holds the workspace's relays (runner/relay/snapshot-gate.ts) while the engine copies
 * its volume, so the copy falls between two requests; a read streams the snapshot's tar as
 * `relay_chunk`s paced by the link (runner/relay/chunked-download.ts); an import arrives as
 * ordered pieces staged in a file under the runner's data directory and becomes the storage at
 * once when the last piece came (a broken upload makes nothing on the engine).
 */
import { createReadStream } from "node:fs";
import { stat } from "node:fs/promises";
import { CodedError } from "../../contracts/errors.ts";
import type { RunnerCommand } from "../../contracts/runner-protocol.ts";
import type { SessionSnapshots } from "../engine/driver.ts";
import { type ChunkSink, sendChunked } from "./chunked-download.ts";
import type { SnapshotGate } from "./snapshot-gate.ts";
import { StagedUploads } from "./staged-uploads.ts";
import { DEFAULT_UPLOAD_LIMITS, type UploadLimits } from "./workspace-commands.ts";

type Of<K extends RunnerCommand["kind"]> = Extract<RunnerCommand, { kind: K }>;

export class SnapshotCommands {
  readonly #snapshots: SessionSnapshots | undefined;
  readonly #gate: SnapshotGate;
  readonly #limits: UploadLimits;
  /** Keyed by the storage made from it: every piece of an import is for the same one. */
  readonly #uploads: StagedUploads<string>;

  /** `stagingDir`: where imports are staged (`<data-dir>/snapshot-uploads`). */
  constructor(
    snapshots: SessionSnapshots | undefined,
    gate: SnapshotGate,
    stagingDir: string,
    limits: UploadLimits = DEFAULT_UPLOAD_LIMITS,
  ) {
    this.#snapshots = snapshots;
    this.#gate = gate;
    this.#uploads = new StagedUploads(stagingDir, limits.uploadIdleMs, "a snapshot upload");
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

  /** Readies the engine for a restore that follows the session's stop (nothing copied); at once. */
  prepareRestore(c: Of<"snapshot_restore_prepare">): Record<string, unknown> {
    this.#engine(c.kind).prepareRestore?.(c.container_name, c.source);
    return {};
  }

  /** `bulk`: the piece's bytes when they came in a binary frame (else base64 in `data`). */
  async write(c: Of<"snapshot_write">, bulk?: Buffer): Promise<Record<string, unknown>> {
    const engine = this.#engine(c.kind);
    const staging = await this.#uploads.piece(c, c.target.storage, () => this.#admit(), bulk);
    if (!staging) return { size: 0 };
    if (!c.done) return { size: staging.size };
    try {
      const file = staging.file;
      const size = (await stat(file)).size;
      const { sizeBytes } = await engine.write(c.target, { size, open: () => createReadStream(file) });
      return { size, size_bytes: sizeBytes };
    } finally {
      await this.#uploads.drop(c.upload_id);
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
    this.#uploads.close();
  }
}
