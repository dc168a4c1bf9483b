/**
 * The workspace files API on Docker (issue 18) through the Engine API's archive endpoints:
 * `HEAD /containers/{id}/archive` (stat), `GET` (a tar of a path) and `PUT` (extract a tar), so
 * no exec is needed to list, read, write or archive. Deleting has no archive endpoint: the runner
 * (control plane, never a client) runs `rm -rf -- PATH` in the container without a shell.
 *
 * Every path is confined before it gets here (contracts/workspace-files.ts); here each of its
 * components is stat'ed in turn, and a symlink whose (engine-resolved) target is outside
 * /workspace is refused with INVALID_ARGUMENT before anything is read or written. With a git image a
 * read does not use that walk: it runs in a container that mounts the session volume only and
 * checks what it opened (`#inVolume`; issue 34 item 17); so does a listing.
 * A workspace without a running container (a stopped session: the stack is at scale 0) is
 * FAILED_PRECONDITION: resume the session first.
 */
import { Readable } from "node:stream";
import type Docker from "dockerode";
import { CodedError } from "../../contracts/errors.ts";
import { WORKSPACE_ROOT, type WorkspaceEntry, isInsideWorkspace } from "../../contracts/workspace-files.ts";
import type { WorkspaceFiles, WorkspaceUpload } from "../engine/driver.ts";
import { notFound, shownPath, tooLarge } from "../engine/workspace-errors.ts";
import { type ListedEntry, workspaceListing } from "../engine/workspace-listing.ts";
import { checkedRead, filesScript } from "../engine/workspace-files-script.ts";
import { runGit, workspaceRepoDiff } from "./repo-seed.ts";
import { TAR_END, readTar, tarHeader, tarPadding } from "./tar.ts";

/** Go's os.FileMode bits in Docker's path stat. */
/** Bytes of the engine's tar a listing reads at most without a git image (it holds the whole subtree). */
export const LIST_TAR_MAX_BYTES = 64 * 1024 * 1024;

/** The tar, ended RESOURCE_EXHAUSTED past LIST_TAR_MAX_BYTES (the stream destroyed with it). */
async function* boundedTar(tar: Readable, path: string): AsyncGenerator<Buffer> {
  let read = 0;
  for await (const chunk of tar as AsyncIterable<Buffer>) {
    read += chunk.length;
    if (read > LIST_TAR_MAX_BYTES)
      throw new CodedError(
        "RESOURCE_EXHAUSTED",
        `listing ${shownPath(path)} reads its whole subtree from the engine, over ${LIST_TAR_MAX_BYTES} bytes: this runner has no git image (AGENT_SESSIONS_GIT_IMAGE) to list one level; list a subdirectory`,
      );
    yield chunk;
  }
}

const MODE_DIR = 2 ** 31;
const MODE_SYMLINK = 2 ** 27;

type PathStat = { name: string; size: number; mode: number; mtime: string; linkTarget: string };

/** Where a workspace path lands after its symlinks (all inside /workspace) were followed. */
type Resolved = {
  /** The deepest existing path, symlinks followed (absolute). */
  base: string;
  stat: PathStat;
  /** The components below `base` that do not exist (empty when the whole path exists). */
  missing: string[];
};

export class DockerWorkspaceFiles implements WorkspaceFiles {
  readonly #docker: Docker;
  readonly #gitImage: string | undefined;

  /** `gitImage`: the digest-pinned image the diff runs git from (runner/docker/repo-seed.ts). */
  constructor(docker: Docker, gitImage?: string) {
    this.#docker = docker;
    this.#gitImage = gitImage;
  }

  /** Needs the volume only: a stopped session's workspace diffs too. */
  diff(containerName: string, path: string, signal?: AbortSignal): Promise<AsyncIterable<Buffer>> {
    return workspaceRepoDiff(this.#docker, this.#gitImage, containerName, path, signal);
  }

  /**
   * One level, read by the files script's `find` in a container of the git image (#inVolume): the
   * engine's archive API has no depth and tars the whole subtree, file bodies included. Without a
   * git image that tar is read, bounded by LIST_TAR_MAX_BYTES (issue 34 item 13).
   */
  async list(containerName: string, path: string, signal?: AbortSignal): Promise<WorkspaceEntry[]> {
    const container = await this.#running(containerName);
    const listed: ListedEntry[] = [];
    if (this.#gitImage) {
      // The files script checks the directory it entered (`pwd -P`), as a read checks what it opened.
      const chunks: Buffer[] = [];
      for await (const chunk of await this.#inVolume(containerName, "list", path, 0, signal))
        chunks.push(chunk);
      const fields = Buffer.concat(chunks).toString("utf8").split("\0");
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
    const r = await this.#resolve(container, path);
    if (r.missing.length > 0) throw notFound(path);
    if (!isDir(r.stat)) throw new CodedError("INVALID_ARGUMENT", `${shownPath(path)} is not a directory`);
    const tar = (await container.getArchive({ path: r.base })) as Readable;
    const destroy = () => tar.destroy(signal?.reason as Error);
    signal?.addEventListener("abort", destroy, { once: true });
    for await (const { header } of readTar(boundedTar(tar, path))) {
      // The archive's top entry is the directory itself; its children are one level below.
      const parts = header.name.split("/").filter(Boolean);
      if (parts.length !== 2) continue;
      listed.push({
        name: parts[1] as string,
        type: header.type,
        size: header.size,
        mtimeSeconds: header.mtime,
        linkTarget: header.linkname,
      });
    }
    signal?.removeEventListener("abort", destroy);
    return workspaceListing(listed);
  }

  async read(
    containerName: string,
    path: string,
    what: "file" | "archive",
    maxBytes: number,
    signal?: AbortSignal,
  ): Promise<AsyncIterable<Buffer>> {
    const container = await this.#running(containerName);
    if (this.#gitImage) return this.#inVolume(containerName, what, path, maxBytes, signal);
    // Without a git image: the engine's archive GET after the walk below. A symlink swapped in
    // between the two still leads out (issue 34 item 17); runners are given a git image for this.
    const r = await this.#resolve(container, path);
    if (r.missing.length > 0) throw notFound(path);
    if (what === "file") {
      if (isDir(r.stat))
        throw new CodedError(
          "INVALID_ARGUMENT",
          `${shownPath(path)} is a directory; download it with :archive`,
        );
      if (r.stat.size > maxBytes) throw tooLarge(maxBytes, r.stat.size);
    }
    const tar = (await container.getArchive({ path: r.base })) as Readable;
    signal?.addEventListener("abort", () => tar.destroy(signal.reason as Error), { once: true });
    if (what === "archive") return tar;
    return (async function* () {
      for await (const { header, body } of readTar(tar)) {
        if (header.type !== "file") continue;
        yield* body();
        return;
      }
    })();
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
    const run = await runGit(this.#docker, {
      image: this.#gitImage as string,
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

  async write(containerName: string, path: string, upload: WorkspaceUpload): Promise<void> {
    const container = await this.#running(containerName);
    if (path === "") throw new CodedError("INVALID_ARGUMENT", "cannot write /workspace itself; name a file");
    const r = await this.#resolve(container, path);
    if (r.missing.length === 0 && isDir(r.stat))
      throw new CodedError("INVALID_ARGUMENT", `${shownPath(path)} is a directory`);
    if (r.missing.length > 0 && !isDir(r.stat))
      throw new CodedError("INVALID_ARGUMENT", `a parent of ${shownPath(path)} is not a directory`);
    const [uid, gid] = userOf((await container.inspect()).Config.User);
    const mtime = Math.floor(Date.now() / 1000);
    // Extracted into the deepest existing directory: the missing ones come first in the tar.
    let target: string;
    let names: string[];
    if (r.missing.length === 0) {
      const slash = r.base.lastIndexOf("/");
      target = r.base.slice(0, slash) || "/";
      names = [r.base.slice(slash + 1)];
    } else {
      target = r.base;
      names = r.missing;
    }
    async function* tar(): AsyncGenerator<Buffer> {
      for (let i = 0; i < names.length - 1; i++)
        yield tarHeader({
          name: names.slice(0, i + 1).join("/"),
          type: "dir",
          size: 0,
          mode: 0o755,
          uid,
          gid,
          mtime,
        });
      yield tarHeader({
        name: names.join("/"),
        type: "file",
        size: upload.size,
        mode: 0o644,
        uid,
        gid,
        mtime,
      });
      let written = 0;
      for await (const chunk of upload.open()) {
        written += chunk.length;
        yield chunk;
      }
      if (written !== upload.size)
        throw new Error(`upload staging changed size (${written} of ${upload.size})`);
      yield tarPadding(upload.size);
      yield TAR_END;
    }
    try {
      await container.putArchive(Readable.from(tar()), { path: target, noOverwriteDirNonDir: "1" });
    } catch (error) {
      throw engineError(error, path);
    }
  }

  async delete(containerName: string, path: string): Promise<boolean> {
    const container = await this.#running(containerName);
    if (path === "") throw new CodedError("INVALID_ARGUMENT", "cannot delete /workspace itself");
    const slash = path.lastIndexOf("/");
    const parentPath = slash === -1 ? "" : path.slice(0, slash);
    const parent = await this.#resolve(container, parentPath);
    if (parent.missing.length > 0 || !isDir(parent.stat)) throw notFound(path);
    // The entry itself, not what a symlink points at.
    const target = `${parent.base}/${path.slice(slash + 1)}`;
    if (!(await this.#stat(container, target))) throw notFound(path);
    const exec = await container.exec({
      Cmd: ["rm", "-rf", "--", target],
      AttachStdout: true,
      AttachStderr: true,
    });
    const stream = await exec.start({ hijack: true, stdin: false });
    await new Promise<void>((resolve, reject) => {
      stream.on("error", reject);
      stream.on("end", resolve);
      stream.on("close", resolve);
      stream.resume();
    });
    const { ExitCode } = await exec.inspect();
    if (ExitCode !== 0)
      throw new CodedError("INTERNAL", `deleting ${shownPath(path)} failed (rm exit ${ExitCode})`);
    return true;
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

  async #stat(container: Docker.Container, absolute: string): Promise<PathStat | undefined> {
    let response: { headers: Record<string, string | string[] | undefined>; resume?: () => void };
    try {
      response = (await container.infoArchive({ path: absolute })) as typeof response;
    } catch (error) {
      if ((error as { statusCode?: number }).statusCode === 404) return undefined;
      throw engineError(error, absolute);
    }
    response.resume?.();
    const raw = response.headers["x-docker-container-path-stat"];
    if (typeof raw !== "string") throw new CodedError("INTERNAL", "the engine gave no path stat");
    return JSON.parse(Buffer.from(raw, "base64").toString("utf8")) as PathStat;
  }

  /** Walks `path` component by component, following symlinks only while they stay inside. */
  async #resolve(container: Docker.Container, path: string): Promise<Resolved> {
    const root = await this.#stat(container, WORKSPACE_ROOT);
    if (!root) throw new CodedError("FAILED_PRECONDITION", `${WORKSPACE_ROOT} is missing in the workload`);
    let base = WORKSPACE_ROOT;
    let stat = root;
    const segments = path === "" ? [] : path.split("/");
    for (const [i, segment] of segments.entries()) {
      const candidate = `${base}/${segment}`;
      let next = await this.#stat(container, candidate);
      if (!next) return { base, stat, missing: segments.slice(i) };
      if ((next.mode & MODE_SYMLINK) !== 0 || next.linkTarget) {
        if (!next.linkTarget || !isInsideWorkspace(next.linkTarget))
          throw new CodedError(
            "INVALID_ARGUMENT",
            `${shownPath(segments.slice(0, i + 1).join("/"))} is a symlink pointing out of ${WORKSPACE_ROOT}`,
          );
        const followed = await this.#stat(container, next.linkTarget);
        if (!followed)
          throw new CodedError(
            "NOT_FOUND",
            `${shownPath(segments.slice(0, i + 1).join("/"))} is a dangling symlink`,
          );
        base = next.linkTarget;
        next = followed;
      } else base = candidate;
      stat = next;
    }
    return { base, stat, missing: [] };
  }
}

function isDir(stat: PathStat): boolean {
  return (stat.mode & MODE_DIR) !== 0;
}

function userOf(user: string | undefined): [number, number] {
  const m = /^(\d+)(?::(\d+))?$/.exec(user ?? "");
  if (!m) return [0, 0];
  const uid = Number(m[1]);
  return [uid, m[2] === undefined ? uid : Number(m[2])];
}

/** An engine refusal without its raw text beyond a short reason. */
function engineError(error: unknown, path: string): CodedError {
  const status = (error as { statusCode?: number }).statusCode;
  const reason = String((error as { json?: { message?: string } }).json?.message ?? "").slice(0, 200);
  if (status === 400 || status === 403)
    return new CodedError("INVALID_ARGUMENT", `the engine refused ${path}${reason ? `: ${reason}` : ""}`);
  if (status === 404) return new CodedError("NOT_FOUND", `${path} does not exist`);
  return new CodedError("INTERNAL", `the engine failed on ${path}`);
}

/** Whether dockerd runs a container of that name (absent or exited: false). */
export async function isContainerRunning(docker: Docker, containerName: string): Promise<boolean> {
  try {
    return (await docker.getContainer(containerName).inspect()).State.Running;
  } catch {
    return false;
  }
}
