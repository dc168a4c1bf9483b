/**
 * The runner's side of the workspace files API (the `workspace_*` commands, PROTOCOL.md): reads
 * are streamed back as base64 `relay_chunk`s paced by the link's send buffer; uploads arrive as
 * ordered pieces staged in a file under the runner's data directory, and are written into the
 * workspace at once when the last piece came (so a broken upload changes nothing there).
 */
import { createReadStream } from "node:fs";
import { stat } from "node:fs/promises";
import { CodedError } from "../../contracts/errors.ts";
import type { RunnerCommand } from "../../contracts/runner-protocol.ts";
import { confineWorkspacePath } from "../../contracts/workspace-files.ts";
import type { WorkspaceFiles } from "../engine/driver.ts";
import { type ChunkSink, sendChunked } from "./chunked-download.ts";
import { StagedUploads } from "./staged-uploads.ts";

type Of<K extends RunnerCommand["kind"]> = Extract<RunnerCommand, { kind: K }>;

/**
 * Bounds on staged uploads (issue 34 item 17): each stages up to the server's file limit on this
 * runner's disk, so a client that starts uploads and stalls them would otherwise fill it.
 */
export type UploadLimits = {
  /** Staged uploads at once on this runner (AGENT_SESSIONS_RUNNER_UPLOADS_MAX). */
  uploadsMax: number;
  /** Staged uploads at once into one workspace (AGENT_SESSIONS_RUNNER_UPLOADS_PER_WORKSPACE_MAX). */
  uploadsPerWorkspaceMax: number;
  /** A staged upload no piece came for this long is dropped with its file (AGENT_SESSIONS_RUNNER_UPLOAD_IDLE_MS). */
  uploadIdleMs: number;
};

export const DEFAULT_UPLOAD_LIMITS: UploadLimits = {
  uploadsMax: 16,
  uploadsPerWorkspaceMax: 4,
  uploadIdleMs: 60_000,
};

export type { ChunkSink };

export class WorkspaceCommands {
  readonly #files: WorkspaceFiles | undefined;
  /** Keyed by the workspace and the path: every piece of an upload is for the same file. */
  readonly #uploads: StagedUploads<{ containerName: string; path: string }>;
  readonly #limits: UploadLimits;

  constructor(
    files: WorkspaceFiles | undefined,
    stagingDir: string,
    limits: UploadLimits = DEFAULT_UPLOAD_LIMITS,
  ) {
    this.#files = files;
    this.#uploads = new StagedUploads(stagingDir, limits.uploadIdleMs, "an upload");
    this.#limits = limits;
  }

  /** The engine, once the command's path is a confined one (the server confines; this checks again). */
  #engine(path: string): WorkspaceFiles {
    if (confineWorkspacePath(path) !== path)
      throw new CodedError(
        "INVALID_ARGUMENT",
        `path ${JSON.stringify(path)} is not a confined workspace path`,
      );
    if (!this.#files)
      throw new CodedError("UNIMPLEMENTED", "this runner's engine has no workspace files API");
    return this.#files;
  }

  /** `signal`: the command's deadline or the server's cancel (runner/link/running-commands.ts); the engine stops its listing. */
  async list(c: Of<"workspace_list">, signal?: AbortSignal): Promise<Record<string, unknown>> {
    return { entries: await this.#engine(c.path).list(c.container_name, c.path, signal) };
  }

  /**
   * `signal`: the command's deadline or the server's cancel: the engine stops its work (a diff's
   * container is removed) and this stops waiting for it.
   */
  async read(
    c: Of<"workspace_read">,
    sink: ChunkSink,
    signal?: AbortSignal,
  ): Promise<Record<string, unknown>> {
    const engine = this.#engine(c.path);
    let source: AsyncIterable<Buffer>;
    if (c.what === "diff") {
      if (!engine.diff) throw new CodedError("UNIMPLEMENTED", "this runner's engine has no workspace diff");
      // The baseline comes from the server, never from the checkout (issue 34 item 12).
      if (!c.seeded_commit)
        throw new CodedError(
          "FAILED_PRECONDITION",
          `no seeded commit was given for the diff of workspace ${c.container_name}: the server recorded none`,
        );
      source = await engine.diff(c.container_name, c.path, c.seeded_commit, signal);
    } else source = await engine.read(c.container_name, c.path, c.what, c.max_bytes, signal);
    return { size: await sendChunked(source, c.max_bytes, sink, signal) };
  }

  /** `bulk`: the piece's bytes when they came in a binary frame (else base64 in `data`). */
  async write(c: Of<"workspace_write">, bulk?: Buffer): Promise<Record<string, unknown>> {
    const engine = this.#engine(c.path);
    const staging = await this.#uploads.piece(
      c,
      { containerName: c.container_name, path: c.path },
      () => this.#admit(c.container_name),
      bulk,
    );
    if (!staging) return { size: 0 };
    if (!c.done) return { size: staging.size };
    try {
      const file = staging.file;
      const size = (await stat(file)).size;
      await engine.write(c.container_name, c.path, { size, open: () => createReadStream(file) });
      return { size };
    } finally {
      await this.#uploads.drop(c.upload_id);
    }
  }

  async delete(c: Of<"workspace_delete">): Promise<Record<string, unknown>> {
    return { deleted: await this.#engine(c.path).delete(c.container_name, c.path) };
  }

  /** Room for one more staged upload into `containerName`, or RESOURCE_EXHAUSTED naming the bound. */
  #admit(containerName: string): void {
    const { uploadsMax, uploadsPerWorkspaceMax, uploadIdleMs } = this.#limits;
    const after = `; retry once one finishes (a stalled one is dropped after ${Math.round(uploadIdleMs / 1000)} s without a piece)`;
    if (this.#uploads.size >= uploadsMax)
      throw new CodedError(
        "RESOURCE_EXHAUSTED",
        `this runner stages ${uploadsMax} uploads at most at once (AGENT_SESSIONS_RUNNER_UPLOADS_MAX)${after}`,
        { limit: uploadsMax, setting: "AGENT_SESSIONS_RUNNER_UPLOADS_MAX" },
      );
    let inWorkspace = 0;
    for (const s of this.#uploads.values()) if (s.key.containerName === containerName) inWorkspace += 1;
    if (inWorkspace >= uploadsPerWorkspaceMax)
      throw new CodedError(
        "RESOURCE_EXHAUSTED",
        `workspace ${containerName} has ${uploadsPerWorkspaceMax} upload${uploadsPerWorkspaceMax === 1 ? "" : "s"} staged already, the most at once (AGENT_SESSIONS_RUNNER_UPLOADS_PER_WORKSPACE_MAX)${after}`,
        { limit: uploadsPerWorkspaceMax, setting: "AGENT_SESSIONS_RUNNER_UPLOADS_PER_WORKSPACE_MAX" },
      );
  }

  /** Drops every staged upload (the runner stops). */
  close(): void {
    this.#uploads.close();
  }
}
