/**
 * The workspace files API on Kubernetes (issue 18), by exec into the session pod's `workspace`
 * sidecar (infra/kubernetes/session.ts): the runner's git image with the session volume at
 * /workspace, so nothing is asked of the agent's image and no client ever execs. The repo seed and
 * diff run in the same sidecar (runner/kubernetes/repo-seed.ts).
 *
 * Every path is confined before it gets here (contracts/workspace-files.ts); in the sidecar each
 * is resolved with its symlinks followed (`realpath -m`), and one that leads out of /workspace is
 * refused with INVALID_ARGUMENT before anything is read or written. Resolving and then opening are
 * two steps an agent can race (swap a directory for a symlink between them; issue 34 item 17), so a
 * read checks what it OPENED (runner/engine/workspace-files-script.ts), which cannot be swapped
 * afterwards. Paths travel as arguments of the exec (they are not secrets). The 1.20 exec protocol
 * cannot close stdin alone, so every command reads exactly what it is told to (an upload's size)
 * and stops.
 *
 * A workspace without a Ready pod (a stopped session: the Deployment is at 0) is
 * FAILED_PRECONDITION: resume the session first.
 */
import type { Readable } from "node:stream";
import { CodedError } from "../../contracts/errors.ts";
import { WORKSPACE_CONTAINER } from "../../contracts/session-pod.ts";
import type { SessionSpec } from "../../contracts/session-spec.ts";
import type { WorkspaceEntry } from "../../contracts/workspace-files.ts";
import type { WorkspaceFiles, WorkspaceUpload } from "../engine/driver.ts";
import { checkedRead, filesError, filesScript } from "../engine/workspace-files-script.ts";
import { type ListedEntry, workspaceListing } from "../engine/workspace-listing.ts";
import { type ExecStream, openStdin, type PodExec } from "./exec.ts";
import { seedWorkspaceRepo, workspaceRepoDiff } from "./repo-seed.ts";

const FILES_SCRIPT = filesScript();

const FIND_TYPES: Record<string, WorkspaceEntry["type"]> = { f: "file", d: "dir", l: "symlink" };

export type WorkspacePods = {
  /** The Ready pod of a workspace, if any. */
  readyPod(containerName: string): Promise<{ name: string; containers: string[] } | undefined>;
};

export class KubernetesWorkspaceFiles implements WorkspaceFiles {
  readonly #exec: PodExec;
  readonly #pods: WorkspacePods;

  constructor(exec: PodExec, pods: WorkspacePods) {
    this.#exec = exec;
    this.#pods = pods;
  }

  async list(containerName: string, path: string, signal?: AbortSignal): Promise<WorkspaceEntry[]> {
    const run = await this.#files(containerName, "list", path);
    // Past the runner command's deadline (or cancelled) the exec ends, and its output with it.
    signal?.addEventListener("abort", () => run.close(), { once: true });
    const chunks: Buffer[] = [];
    for await (const chunk of run.stdout) chunks.push(chunk as Buffer);
    await this.#check(run, path);
    const fields = Buffer.concat(chunks).toString("utf8").split("\0");
    const listed: ListedEntry[] = [];
    for (let i = 0; i + 5 <= fields.length; i += 5) {
      const [kind = "", size = "0", mtime = "0", name = "", link = ""] = fields.slice(i, i + 5);
      listed.push({
        name,
        type: FIND_TYPES[kind] ?? "other",
        size: Number(size),
        mtimeSeconds: Number(mtime),
        linkTarget: link,
      });
    }
    return workspaceListing(listed);
  }

  async read(
    containerName: string,
    path: string,
    what: "file" | "archive",
    maxBytes: number,
    signal?: AbortSignal,
  ): Promise<AsyncIterable<Buffer>> {
    const run = await this.#files(containerName, what, path, what === "file" ? [String(maxBytes)] : []);
    signal?.addEventListener("abort", () => run.close(), { once: true });
    return checkedRead(run, path, maxBytes, signal);
  }

  async write(containerName: string, path: string, upload: WorkspaceUpload): Promise<void> {
    const stdin = openStdin();
    const run = await this.#files(containerName, "write", path, [String(upload.size)], stdin);
    run.stdout.resume();
    try {
      for await (const chunk of upload.open()) stdin.write(chunk);
    } catch (error) {
      run.close();
      throw error;
    }
    await this.#check(run, path);
  }

  async delete(containerName: string, path: string): Promise<boolean> {
    const run = await this.#files(containerName, "delete", path);
    run.stdout.resume();
    await this.#check(run, path);
    return true;
  }

  /** Needs a Ready pod: a stopped session is FAILED_PRECONDITION, as for the files. */
  diff(
    containerName: string,
    path: string,
    seededCommit: string,
    signal?: AbortSignal,
  ): Promise<AsyncIterable<Buffer>> {
    return workspaceRepoDiff(
      this.#exec,
      () => this.#pod(containerName),
      containerName,
      path,
      seededCommit,
      signal,
    );
  }

  /**
   * Seeds the workspace from `spec.repo` unless it already was (runner/kubernetes/repo-seed.ts);
   * the commit this seed fetched, undefined when it fetched nothing.
   */
  seed(
    containerName: string,
    spec: SessionSpec,
    credentials: Record<string, string>,
  ): Promise<string | undefined> {
    return seedWorkspaceRepo(this.#exec, () => this.#pod(containerName), spec, credentials);
  }

  async #files(
    containerName: string,
    op: string,
    path: string,
    extra: string[] = [],
    stdin?: Readable,
  ): Promise<ExecStream> {
    const pod = await this.#pod(containerName);
    return this.#exec.stream(
      pod,
      WORKSPACE_CONTAINER,
      ["/bin/sh", "-c", FILES_SCRIPT, "sh", op, path, ...extra],
      {
        ...(stdin ? { stdin } : {}),
      },
    );
  }

  async #pod(containerName: string): Promise<string> {
    const pod = await this.#pods.readyPod(containerName);
    if (!pod)
      throw new CodedError(
        "FAILED_PRECONDITION",
        `workspace ${containerName} has no running pod (the session is stopped); resume it first`,
      );
    if (!pod.containers.includes(WORKSPACE_CONTAINER))
      throw new CodedError(
        "FAILED_PRECONDITION",
        `the pod of workspace ${containerName} has no ${WORKSPACE_CONTAINER} sidecar (it was provisioned by a runner without a git image); provision it again`,
      );
    return pod.name;
  }

  /** The command's end as the files API's error, if it failed. */
  async #check(run: ExecStream, path: string, maxBytes?: number): Promise<void> {
    const error = filesError(await run.exit, run.stderr(), path, maxBytes);
    if (error) throw error;
  }
}
