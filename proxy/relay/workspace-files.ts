import { randomUUID } from "node:crypto";
import type { Context } from "hono";
import { CodedError } from "../../contracts/errors.ts";
import { HARNESS_SESSION_KIND } from "../../contracts/harness-session.ts";
import type { RunnerCommand } from "../../contracts/runner-protocol.ts";
import {
  WORKSPACE_CHUNK_BYTES,
  type WorkspaceDeleteResult,
  type WorkspaceListing,
  type WorkspaceWriteResult,
  confineWorkspacePath,
} from "../../contracts/workspace-files.ts";
import { chunkBytes, type CommandOutcome } from "../lifecycle/runner-directory.ts";
import type { HarnessStore } from "../store/harness-store.ts";
import type { Store } from "../store/store.ts";
import { attachmentDisposition } from "./content-disposition.ts";
import type { RelayLink } from "./request-relay.ts";

export type WorkspaceFilesOptions = {
  harness?: HarnessStore | undefined;
  store: Store;
  runners: RelayLink;
  /** Largest upload, download or archive; more is 413 RESOURCE_EXHAUSTED. */
  maxBytes: number;
  /**
   * A files call wakes a Paused HarnessSession first (the paused tier), so its status says Ready;
   * the runner would thaw the workload for it anyway. @default none
   */
  wake?: ((containerName: string, why: string) => Promise<void>) | undefined;
};

/** Which runner holds a workspace, and its container. */
export type WorkspaceTarget = { runner_id: string; container_name: string; label: string };

const COMMAND_TIMEOUT_MS = 120_000;

/**
 * The workspace files API (issue 18), relayed client → server → runner (`workspace_*` commands)
 * → the engine; never an exec by a client. Paths are confined here first (400 INVALID_ARGUMENT,
 * nothing sent); downloads stream the runner's chunks through, uploads are cut into pieces of
 * WORKSPACE_CHUNK_BYTES sent one after another (each awaited), so neither side holds a whole file.
 */
export class WorkspaceFilesRelay {
  readonly #o: WorkspaceFilesOptions;

  constructor(options: WorkspaceFilesOptions) {
    this.#o = options;
  }

  get maxBytes(): number {
    return this.#o.maxBytes;
  }

  async ofSession(namespace: string, name: string): Promise<WorkspaceTarget> {
    const record = await this.#o.harness?.getHarnessSession(namespace, name);
    if (!record) throw new CodedError("NOT_FOUND", `${HARNESS_SESSION_KIND} ${namespace}/${name} not found`);
    if (record.container_name === undefined)
      throw new CodedError(
        "FAILED_PRECONDITION",
        `${HARNESS_SESSION_KIND} ${namespace}/${name} has no workspace yet`,
      );
    const target = await this.ofWorkspace(record.container_name);
    return { ...target, label: `${HARNESS_SESSION_KIND} ${namespace}/${name}` };
  }

  async ofWorkspace(containerName: string): Promise<WorkspaceTarget> {
    const workspace = await this.#o.store.getWorkspace(containerName);
    if (!workspace) throw new CodedError("NOT_FOUND", `workspace ${containerName} not found`);
    await this.#o.wake?.(containerName, "a files call");
    return {
      runner_id: workspace.runner_id,
      container_name: containerName,
      label: `workspace ${containerName}`,
    };
  }

  async list(target: WorkspaceTarget, rawPath: string): Promise<WorkspaceListing> {
    const path = confineWorkspacePath(rawPath);
    const r = await this.#command(target, {
      kind: "workspace_list",
      container_name: target.container_name,
      path,
    });
    return { path, entries: r.entries };
  }

  async delete(target: WorkspaceTarget, rawPath: string): Promise<WorkspaceDeleteResult> {
    const path = confineWorkspacePath(rawPath);
    if (path === "") throw new CodedError("INVALID_ARGUMENT", "cannot delete /workspace itself");
    const r = await this.#command(target, {
      kind: "workspace_delete",
      container_name: target.container_name,
      path,
    });
    return { path, deleted: r.deleted };
  }

  /**
   * `GET …:diff`: a git diff of the workspace's checkout against the commit it was seeded from
   * (text/x-diff, at most maxBytes). That commit is the one the seeding provision returned and the
   * store kept (issue 34 item 12): the runner gets it with the command and never reads a ref in the
   * checkout, which the agent could point at a commit of its own to hide its changes.
   * FAILED_PRECONDITION when its workstream names no repository, and (reason SeededCommitUnknown)
   * for a workspace seeded before the server recorded seeded commits: there is no baseline the
   * agent could not have moved, and none is guessed.
   */
  async diff(c: Context, target: WorkspaceTarget): Promise<Response> {
    const workspace = await this.#o.store.getWorkspace(target.container_name);
    const repo = workspace?.spec.repo;
    if (!repo)
      throw new CodedError(
        "FAILED_PRECONDITION",
        `${target.label} was not seeded from a repository (its workstream names no repo): there is nothing to diff against`,
      );
    if (!workspace?.seeded_commit)
      throw new CodedError(
        "FAILED_PRECONDITION",
        `${target.label} has no recorded seeded commit (it was seeded before the server kept one, or its seed's answer was lost): the checkout's own seed ref could have been moved by the agent, so there is no trustworthy baseline to diff against; a workspace provisioned again from scratch (removed, then provisioned) has one`,
        { reason: "SeededCommitUnknown" },
      );
    return this.download(c, target, repo.path, "diff", workspace.seeded_commit);
  }

  /** `GET …/files/{path}` (what: file), `GET …:archive?path=` (a tar) or the diff of a checkout. */
  async download(
    c: Context,
    target: WorkspaceTarget,
    rawPath: string,
    what: "file" | "archive" | "diff",
    /** `what: diff`: the recorded commit the checkout was seeded at. */
    seededCommit?: string,
  ): Promise<Response> {
    const path = confineWorkspacePath(rawPath);
    const relayId = randomUUID();
    let controller!: ReadableStreamDefaultController<Uint8Array>;
    let ended = false;
    // A client that goes away ends the body; the runner's remaining chunks (bounded by
    // max_bytes) are then dropped here.
    const body = new ReadableStream<Uint8Array>(
      {
        start: (ctl) => {
          controller = ctl;
        },
        cancel: () => {
          ended = true;
        },
      },
      { highWaterMark: 0 },
    );
    let started: (value: "chunk") => void = () => {};
    const firstChunk = new Promise<"chunk">((resolve) => {
      started = resolve;
    });
    const unsubscribe = this.#o.runners.onRelayChunk(relayId, (chunk) => {
      if (ended) return;
      started("chunk");
      try {
        const bytes = chunkBytes(chunk);
        if (bytes.length > 0) controller.enqueue(bytes);
        if (chunk.done) {
          ended = true;
          controller.close();
        }
      } catch {
        ended = true; // the body was already closed by its reader
      }
    });
    const outcome = this.#o.runners
      .command(
        target.runner_id,
        {
          kind: "workspace_read",
          container_name: target.container_name,
          path,
          what,
          relay_id: relayId,
          max_bytes: this.#o.maxBytes,
          ...(what === "diff" && seededCommit ? { seeded_commit: seededCommit } : {}),
        },
        COMMAND_TIMEOUT_MS,
      )
      .finally(unsubscribe);
    const first = await Promise.race([firstChunk, outcome]);
    if (first !== "chunk" && !first.ok) throw this.#failure(target, first.error);
    void outcome.then((o) => {
      if (ended) return;
      ended = true;
      // After the first byte a failure can only cut the body short.
      try {
        if (!o.ok) controller.error(new Error(o.error.message));
        else controller.close();
      } catch {
        // the reader went away first
      }
    });
    const base = path === "" ? "workspace" : (path.split("/").pop() as string);
    if (what === "diff") return c.body(body, 200, { "content-type": "text/x-diff; charset=utf-8" });
    return c.body(body, 200, {
      "content-type": what === "archive" ? "application/x-tar" : "application/octet-stream",
      "content-disposition": attachmentDisposition(what === "archive" ? `${base}.tar` : base),
    });
  }

  /** `PUT …/files/{path}`: the body is the content. */
  async upload(c: Context, target: WorkspaceTarget, rawPath: string): Promise<Response> {
    const path = confineWorkspacePath(rawPath);
    if (path === "") throw new CodedError("INVALID_ARGUMENT", "cannot write /workspace itself; name a file");
    const max = this.#o.maxBytes;
    const declared = Number(c.req.header("content-length") ?? Number.NaN);
    if (declared > max) return tooLarge(c, max);
    const uploadId = randomUUID();
    const piece = (seq: number, done: boolean): RunnerCommand => ({
      kind: "workspace_write",
      container_name: target.container_name,
      path,
      upload_id: uploadId,
      seq,
      // The bytes go beside the command (`bulk`): raw in a binary frame, or base64 for an older runner.
      data: "",
      done,
    });
    let seq = 0;
    let size = 0;
    let pending: Buffer[] = [];
    let pendingBytes = 0;
    const send = async (done: boolean) => {
      const data = Buffer.concat(pending);
      pending = [];
      pendingBytes = 0;
      const r = await this.#command(
        target,
        piece(seq, done) as Extract<RunnerCommand, { kind: "workspace_write" }>,
        data,
      );
      seq += 1;
      return r;
    };
    const abort = async () => {
      if (seq > 0)
        await this.#o.runners.command(target.runner_id, {
          ...piece(seq, false),
          abort: true,
        } as RunnerCommand);
    };
    const reader = c.req.raw.body?.getReader();
    try {
      for (;;) {
        const next = reader ? await reader.read() : { done: true as const, value: undefined };
        if (next.done) break;
        let chunk = Buffer.from(next.value);
        size += chunk.length;
        if (size > max) {
          await reader?.cancel().catch(() => undefined);
          await abort();
          return tooLarge(c, max);
        }
        while (chunk.length > 0) {
          const room = WORKSPACE_CHUNK_BYTES - pendingBytes;
          pending.push(chunk.subarray(0, room));
          pendingBytes += Math.min(room, chunk.length);
          chunk = chunk.subarray(room);
          if (pendingBytes >= WORKSPACE_CHUNK_BYTES) await send(false);
        }
      }
      const r = await send(true);
      const result: WorkspaceWriteResult = { path, size: r.size };
      return c.json(result, 201);
    } catch (error) {
      await abort().catch(() => undefined);
      throw error;
    }
  }

  async #command<C extends Extract<RunnerCommand, { kind: `workspace_${string}` }>>(
    target: WorkspaceTarget,
    command: C,
    bulk?: Uint8Array,
  ): Promise<Extract<CommandOutcome<C>, { ok: true }>["result"]> {
    const outcome = await this.#o.runners.command(target.runner_id, command, COMMAND_TIMEOUT_MS, bulk);
    if (!outcome.ok) throw this.#failure(target, outcome.error);
    return outcome.result;
  }

  #failure(
    target: WorkspaceTarget,
    error: { code: CodedError["code"]; message: string; details?: Record<string, unknown> | undefined },
  ): CodedError {
    if (error.code === "RESOURCE_EXHAUSTED")
      return new CodedError(error.code, error.message, { limit_bytes: this.#o.maxBytes });
    return new CodedError(error.code, `${target.label}: ${error.message}`, error.details);
  }
}

function tooLarge(c: Context, max: number): Response {
  return c.json(
    { code: "RESOURCE_EXHAUSTED", message: `the upload exceeds ${max} bytes`, details: { limit_bytes: max } },
    413,
  );
}
