/**
 * The workspace files API on Docker (issue 18). Every path is confined before it gets here
 * (contracts/workspace-files.ts); here each operation runs the files script (runner/engine/
 * workspace-files-script.ts, the one the Kubernetes sidecar runs), which decides in the
 * container, in one step, what a path names (issue 34 item 17: an agent can swap a directory for
 * a symlink between any check and act made from outside):
 * - reads and listings in a short-lived container of the git image that mounts the session volume
 *   only (`#inVolume`); they check what they OPENED, so a later swap changes nothing;
 * - writes and deletes by exec in the workload container, as its user (the owner of what the agent
 *   writes): the script enters the parent one component at a time, refusing any symlink, and acts
 *   relative to the directory it holds (`#inWorkload`). Busybox (the reference image) and
 *   coreutils (Debian images) both run it.
 * The Engine API's archive endpoints are never used: they resolve a path in the workload's root
 * following every intermediate symlink, with no no-follow option, and their answer (a tar named
 * after the last component, a stat of it) cannot tell that a swap redirected them; a GET served
 * the container's /etc/passwd and a PUT (extracted as root) could land under /etc. So a runner
 * without a git image lists and reads nothing (FAILED_PRECONDITION, as a Kubernetes pod without the
 * sidecar): there is no safe one-step read in an arbitrary agent image (busybox has no
 * `realpath -m` or `find -printf`).
 * A workspace without a running container (a stopped session: the stack is at scale 0) is
 * FAILED_PRECONDITION: resume the session first.
 */
import { type Duplex, PassThrough } from "node:stream";
import type Docker from "dockerode";
import type { WorkspaceEntry } from "../../contracts/workspace-files.ts";
import type { WorkspaceFiles, WorkspaceUpload } from "../engine/driver.ts";
import { noGitImage } from "../engine/repo-scripts.ts";
import { checkedRead, filesError, filesScript } from "../engine/workspace-files-script.ts";
import { type ListedEntry, workspaceListing } from "../engine/workspace-listing.ts";
import { execExitCode } from "./exec.ts";
import { runGit, workspaceRepoDiff } from "./repo-seed.ts";
import { CodedError } from "../../contracts/errors.ts";

const FILES_SCRIPT = filesScript();

/** Characters of a write's or delete's stderr kept for its error. */
const MAX_STDERR_CHARS = 4096;

export class DockerWorkspaceFiles implements WorkspaceFiles {
  readonly #docker: Docker;
  readonly #gitImage: string | undefined;

  /** `gitImage`: the digest-pinned image the diff runs git from (runner/docker/repo-seed.ts). */
  constructor(docker: Docker, gitImage?: string) {
    this.#docker = docker;
    this.#gitImage = gitImage;
  }

  /** Needs the volume only: a stopped session's workspace diffs too. */
  diff(
    containerName: string,
    path: string,
    seededCommit: string,
    signal?: AbortSignal,
  ): Promise<AsyncIterable<Buffer>> {
    return workspaceRepoDiff(this.#docker, this.#gitImage, containerName, path, seededCommit, signal);
  }

  /** One level, read by the files script's `find` in a container of the git image (#inVolume). */
  async list(containerName: string, path: string, signal?: AbortSignal): Promise<WorkspaceEntry[]> {
    await this.#running(containerName);
    // The files script checks the directory it entered (`pwd -P`), as a read checks what it opened.
    const chunks: Buffer[] = [];
    for await (const chunk of await this.#inVolume(containerName, "list", path, 0, signal))
      chunks.push(chunk);
    const fields = Buffer.concat(chunks).toString("utf8").split("\0");
    const listed: ListedEntry[] = [];
    for (let i = 0; i + 5 <= fields.length; i += 5) {
      const [kind = "", size = "0", mtime = "0", name = "", link = ""] = fields.slice(i, i + 5);
      listed.push({
        name,
        type: kind === "f" ? "file" : kind === "d" ? "dir" : kind === "l" ? "symlink" : "other",
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
    await this.#running(containerName);
    return this.#inVolume(containerName, what, path, maxBytes, signal);
  }

  /**
   * A read in one step that cannot leave the volume (issue 34 item 17). The archive GET resolves
   * its path in the workload's root following every intermediate symlink, so a directory swapped
   * for a link to /etc after our stat walk served the container's /etc/passwd; Docker has no
   * no-follow option, and the returned tar names only the last component, so nothing in the
   * answer tells that it came from elsewhere. Instead the files script (runner/engine/
   * workspace-files-script.ts, the one the Kubernetes sidecar runs) reads in a short-lived
   * container of the git image that mounts the session volume only, read-only, with no network:
   * it checks the path of what it OPENED (so a later swap changes nothing), and even a path out of
   * /workspace there finds the git image's files, never the workload's.
   */
  async #inVolume(
    containerName: string,
    what: "file" | "archive" | "list",
    path: string,
    maxBytes: number,
    signal?: AbortSignal,
  ): Promise<AsyncIterable<Buffer>> {
    if (!this.#gitImage)
      throw noGitImage(
        "list or read workspace files (the engine's archive API follows a symlink an agent can swap in)",
      );
    const run = await runGit(this.#docker, {
      image: this.#gitImage,
      base: containerName,
      script: `set -- "$FILES_OP" "$FILES_PATH" "$FILES_MAX"\n${filesScript()}`,
      env: [`FILES_OP=${what}`, `FILES_PATH=${path}`, `FILES_MAX=${maxBytes}`],
      network: "none",
      readOnly: true,
    });
    const close = () => void run.remove();
    if (signal?.aborted) close();
    signal?.addEventListener("abort", close, { once: true });
    return checkedRead(
      { stdout: run.stdout, exit: run.exit, stderr: run.stderr, close },
      path,
      maxBytes,
      signal,
    );
  }

  /** Through the files script in the workload container, which refuses any symlink in the path. */
  async write(containerName: string, path: string, upload: WorkspaceUpload): Promise<void> {
    const container = await this.#running(containerName);
    await this.#inWorkload(container, "write", path, [String(upload.size)], upload);
  }

  /** The entry itself (a symlink is removed, not followed), through the files script. */
  async delete(containerName: string, path: string): Promise<boolean> {
    const container = await this.#running(containerName);
    await this.#inWorkload(container, "delete", path, []);
    return true;
  }

  /**
   * The files script by exec in the workload container, as the container's user (so what it
   * writes is the agent's own, and it can reach nothing the agent cannot), the upload on stdin
   * (the script reads exactly its size). Its exit status is the answer (`filesError`).
   */
  async #inWorkload(
    container: Docker.Container,
    op: "write" | "delete",
    path: string,
    extra: string[],
    upload?: WorkspaceUpload,
  ): Promise<void> {
    const exec = await container.exec({
      Cmd: ["/bin/sh", "-c", FILES_SCRIPT, "sh", op, path, ...extra],
      AttachStdin: upload !== undefined,
      AttachStdout: true,
      AttachStderr: true,
    });
    const stream = (await exec.start({
      hijack: true,
      stdin: upload !== undefined,
    })) as Duplex;
    const stdout = new PassThrough();
    const errors = new PassThrough();
    let stderr = "";
    errors.on("data", (chunk: Buffer) => {
      if (stderr.length < MAX_STDERR_CHARS) stderr += chunk.toString("utf8");
    });
    stdout.resume();
    this.#docker.modem.demuxStream(stream, stdout, errors);
    // A script that refuses before reading its stdin ends the stream: writing stops there, and
    // its exit status (not the broken pipe) is the answer.
    let ended = false;
    const done = new Promise<void>((resolve) => {
      const end = () => {
        ended = true;
        resolve();
      };
      stream.on("end", end);
      stream.on("close", end);
      stream.on("error", end);
    });
    if (upload) {
      let written = 0;
      try {
        for await (const chunk of upload.open()) {
          if (ended) break;
          written += chunk.length;
          if (!stream.write(chunk)) await Promise.race([new Promise((r) => stream.once("drain", r)), done]);
        }
        // The script reads exactly the announced size: a short staging file would leave it waiting.
        if (!ended && written !== upload.size)
          throw new CodedError("INTERNAL", `upload staging changed size (${written} of ${upload.size})`);
      } catch (error) {
        stream.destroy(error as Error);
        throw error;
      }
    }
    await done;
    const error = filesError(await execExitCode(exec), stderr, path);
    if (error) throw error;
  }

  async #running(containerName: string): Promise<Docker.Container> {
    const container = this.#docker.getContainer(containerName);
    if (!(await isContainerRunning(this.#docker, containerName)))
      throw new CodedError(
        "FAILED_PRECONDITION",
        `workspace ${containerName} has no running container (the session is stopped); resume it first`,
      );
    return container;
  }
}

/** Whether dockerd runs a container of that name (absent or exited: false). */
export async function isContainerRunning(docker: Docker, containerName: string): Promise<boolean> {
  try {
    return (await docker.getContainer(containerName).inspect()).State.Running;
  } catch {
    return false;
  }
}
