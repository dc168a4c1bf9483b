/**
 * Snapshots on Docker (issue 38, contracts/session-snapshot.ts): a snapshot is a named volume of
 * its own (`target.storage`), labelled with the snapshot's namespace and name, declared in a
 * stack of its own that is recorded behind the engine's work (the provider adopts the volume).
 *
 * Every copy (take, restore, a fork's seed) runs in a short-lived container of the runner's git
 * image (digest-pinned, AGENT_SESSIONS_GIT_IMAGE), hardened like the repository seed's
 * (runner/docker/repo-seed.ts): non-root 65532, read-only root, every capability dropped, no new
 * privileges, no network, bounded memory and PIDs, only the volumes it needs (the one it reads
 * mounted read-only), removed whatever happens. The volume it writes is mounted at `/workspace`, which the git image holds as
 * 65532's own directory: Docker gives an empty volume that owner on its first mount, so the copy
 * (as 65532) can write its root. `cp -a` keeps modes, times and symlinks as they are; the files an
 * agent wrote are 65532's, and stay so, so a fork's agent writes them as before.
 *
 * A read (export) and a write (import) start no container: dockerd's own archive of, or extract
 * into, a container of the git image that mounts the storage and never starts (`read`, `write`).
 *
 * Size is the files' apparent bytes summed (`find -printf %s`, or the tar's regular files on an
 * import), directories and links aside.
 */
import { randomBytes } from "node:crypto";
import { Readable } from "node:stream";
import type Docker from "dockerode";
import { CodedError } from "../../contracts/errors.ts";
import {
  Labels,
  LABEL_PREFIX,
  type SessionSpec,
  type SnapshotStorage,
} from "../../contracts/session-spec.ts";
import { snapshotVolumeInputs } from "../../infra/docker/provider/snapshot-volume.ts";
import type { StackManager } from "../../stacks/index.ts";
import { sessionVolumeInputs } from "../../infra/docker/provider/session-network.ts";
import type { SessionSnapshots, WorkspaceUpload } from "../engine/driver.ts";
import type { DriverLog } from "../engine/fast-path.ts";
import { noGitImage } from "../engine/repo-scripts.ts";
import { REPLACE_FUNCTION, VOLUME_SYNC_SCRIPT } from "../engine/volume-sync-script.ts";
import { type SnapshotTarStats, snapshotTarForExtract } from "./snapshot-tar.ts";
import {
  assertImage,
  type ShortLivedRun,
  shortLivedHostConfig,
  startShortLived,
} from "./short-lived-container.ts";

/** On a fork's session volume: the snapshot storage it was seeded from (set when it was made). */
export const SEEDED_FROM_LABEL = `${LABEL_PREFIX}/seeded-from`;

/** The part of the StackManager a snapshot's stack needs (stacks/stack-manager.ts). */
export type SnapshotStacks = Pick<StackManager, "upSnapshot" | "destroySnapshot">;

/** A copy taking longer than this is stopped (its container removed) and fails. */
const COPY_TIMEOUT_MS = 10 * 60_000;

/** Sums the apparent sizes of the regular files under `$1` (awk prints integers past 2^31 too). */
const SIZE_OF = `find "$1" -type f -printf '%s\\n' | awk '{ s += $1 } END { printf "%.0f\\n", s }'`;

/** take: the session volume (read-only at /source) into the new one (/workspace). */
const TAKE_SCRIPT = `set -e
cp -a /source/. /workspace/
set -- /workspace
${SIZE_OF}`;

/** a fork's seed: the target (made just now) emptied, then the snapshot (read-only at /source) copied in. */
const REPLACE_SCRIPT = `set -e
find /workspace -mindepth 1 -type d ! -perm -u=w -exec chmod u+w {} +
find /workspace -mindepth 1 -delete
cp -a /source/. /workspace/`;

/**
 * restore: the volume made what the snapshot (read-only at /source) holds, only what differs
 * removed and copied (runner/engine/volume-sync-script.ts; its text is the script's `$1`).
 */
const RESTORE_SCRIPT = `set -e
VOLUME_SYNC=$1
${REPLACE_FUNCTION}
replace /source /workspace /tmp`;

type Mount = { volume: string; target: "/source" | "/workspace" | "/volume"; readOnly: boolean };

export class DockerSnapshots implements SessionSnapshots {
  readonly #docker: Docker;
  readonly #gitImage: string | undefined;
  readonly #stacks: SnapshotStacks | undefined;
  readonly #log: DriverLog;
  /** The background `upSnapshot` recording each storage, until it settles. */
  readonly #recordings = new Map<string, Promise<unknown>>();
  /** Copy containers being removed behind the answer of their copy (`remove` never rejects). */
  readonly #removals = new Set<Promise<void>>();

  /** `stacks`: where snapshot stacks are recorded; without one (a test) only the engine is used. */
  constructor(docker: Docker, gitImage: string | undefined, stacks?: SnapshotStacks, log?: DriverLog) {
    this.#docker = docker;
    this.#gitImage = gitImage;
    this.#stacks = stacks;
    this.#log = log ?? (() => undefined);
  }

  async take(
    containerName: string,
    target: SnapshotStorage,
    signal?: AbortSignal,
  ): Promise<{ sizeBytes: number }> {
    const image = this.#image("take a snapshot");
    const source = workspaceVolume(containerName);
    if (!(await volumeExists(this.#docker, source)))
      throw new CodedError("NOT_FOUND", `workspace ${containerName} has no volume to snapshot`);
    await this.#create(target);
    try {
      const out = await this.#copy(
        image,
        containerName,
        "take",
        TAKE_SCRIPT,
        [
          { volume: source, target: "/source", readOnly: true },
          { volume: target.storage, target: "/workspace", readOnly: false },
        ],
        signal,
      );
      const sizeBytes = parseSize(out);
      this.#record(target);
      return { sizeBytes };
    } catch (error) {
      await removeVolume(this.#docker, target.storage);
      throw error;
    }
  }

  async remove(target: SnapshotStorage): Promise<boolean> {
    // A recording under way finishes first: its `up` would otherwise declare it again. A copy
    // container still mounting the volume would keep it in use.
    await Promise.all([this.#recordings.get(target.storage), this.copiesRemoved()]);
    const destroyed = this.#stacks
      ? await this.#stacks.destroySnapshot(target.namespace, target.name)
      : false;
    // No stack recorded yet (a runner that died before it), or one that did not hold the volume.
    const removed = await removeVolume(this.#docker, target.storage);
    return destroyed || removed;
  }

  /**
   * The Engine API's archive of `/volume` in a container of the git image that mounts the storage
   * there read-only and is never started: dockerd tars it itself, entries named `volume/…`,
   * symlinks as links (never followed below the mount point, which is no link). Measured on the
   * test bed with 50 MB in 500 files: 0.28 s, against 3.3 s for `tar` in a started container
   * read through its attached stdout.
   */
  async read(
    target: SnapshotStorage,
    maxBytes: number,
    signal?: AbortSignal,
  ): Promise<AsyncIterable<Buffer>> {
    const image = this.#image("read a snapshot");
    await this.#mustExist(target);
    await assertImage(this.#docker, image);
    const container = await this.#docker.createContainer(
      copyContainerOptions(image, target.storage, "read", "true", [
        { volume: target.storage, target: "/volume", readOnly: true },
      ]),
    );
    const remove = () =>
      container.remove({ force: true }).then(
        () => undefined,
        () => undefined,
      );
    let archive: NodeJS.ReadableStream;
    try {
      archive = await container.getArchive({ path: "/volume" });
    } catch (error) {
      await remove();
      throw error;
    }
    const stop = () => (archive as unknown as { destroy?: () => void }).destroy?.();
    if (signal?.aborted) stop();
    signal?.addEventListener("abort", stop, { once: true });
    return (async function* () {
      let size = 0;
      try {
        for await (const chunk of archive) {
          size += (chunk as Buffer).length;
          if (size > maxBytes)
            throw new CodedError(
              "RESOURCE_EXHAUSTED",
              `snapshot ${target.name} exceeds the limit of ${maxBytes} bytes`,
              { limit_bytes: maxBytes },
            );
          yield chunk as Buffer;
        }
        signal?.throwIfAborted();
      } finally {
        signal?.removeEventListener("abort", stop);
        stop();
        await remove();
      }
    })();
  }

  /**
   * An import: the tar (entries under `volume/`, checked by the server) extracted by dockerd
   * itself (`PUT /containers/{id}/archive`) into a container of the git image that mounts the new
   * storage at `/volume` and is never started, the tar re-written on the way for it (owner 65532,
   * only `volume/…`, the runner's own checks: runner/docker/snapshot-tar.ts); the size summed
   * from the tar's regular files. Measured apart on the test bed: 0.33 s for 50 MB in 500 files,
   * against 1.4 s for `tar -x` in a started container fed on its stdin. Anything refused or
   * failed removes the container and the storage.
   */
  async write(target: SnapshotStorage, upload: WorkspaceUpload): Promise<{ sizeBytes: number }> {
    const image = this.#image("import a snapshot");
    const began = performance.now();
    await assertImage(this.#docker, image);
    await this.#create(target);
    let container: Docker.Container | undefined;
    try {
      container = await this.#docker.createContainer(extractContainerOptions(image, target.storage));
      const stats: SnapshotTarStats = { bytes: 0, fileBytes: 0, entries: 0 };
      // The re-writer's own failure is the one told (dockerd then only sees a request cut short).
      let refused: unknown;
      const tar = Readable.from(
        (async function* () {
          try {
            yield* snapshotTarForExtract(upload.open(), stats);
          } catch (error) {
            refused = error;
            throw error;
          }
        })(),
        { objectMode: false },
      );
      try {
        // Extracted at the root: every entry is `volume/…`, which is the mount (never-started, so
        // its root file system is writable only to dockerd here; see extractContainerOptions).
        await container.putArchive(tar, { path: "/", abortSignal: AbortSignal.timeout(COPY_TIMEOUT_MS) });
      } catch (error) {
        if (refused !== undefined) throw refused;
        throw new CodedError(
          "INTERNAL",
          `the snapshot import into ${target.storage} failed: ${String((error as Error).message ?? error).slice(0, 1000)}`,
        );
      } finally {
        tar.destroy();
      }
      if (refused !== undefined) throw refused;
      this.#log("info", "snapshot copy done", {
        what: "import",
        run_ms: Math.round(performance.now() - began),
      });
      if (stats.bytes !== upload.size)
        throw new CodedError("INTERNAL", `upload staging changed size (${stats.bytes} of ${upload.size})`);
      this.#removeBehind(
        container.remove({ force: true }).then(
          () => undefined,
          () => undefined,
        ),
      );
      container = undefined;
      this.#record(target);
      return { sizeBytes: stats.fileBytes };
    } catch (error) {
      await container?.remove({ force: true }).catch(() => undefined);
      await removeVolume(this.#docker, target.storage);
      throw error;
    }
  }

  async restore(containerName: string, source: SnapshotStorage): Promise<void> {
    const image = this.#image("restore a snapshot");
    const info = await this.#docker
      .getContainer(containerName)
      .inspect()
      .catch(() => undefined);
    if (info?.State.Running)
      throw new CodedError(
        "FAILED_PRECONDITION",
        `workspace ${containerName} is running${info.State.Paused ? " (paused)" : ""}: stop it before restoring a snapshot`,
      );
    const volume = workspaceVolume(containerName);
    if (!(await volumeExists(this.#docker, volume)))
      throw new CodedError("NOT_FOUND", `workspace ${containerName} has no volume to restore`);
    await this.#mustExist(source);
    await this.#copy(
      image,
      containerName,
      "restore",
      RESTORE_SCRIPT,
      [
        { volume: source.storage, target: "/source", readOnly: true },
        { volume, target: "/workspace", readOnly: false },
      ],
      undefined,
      [VOLUME_SYNC_SCRIPT],
    );
  }

  /**
   * A fork's seed (spec.seedSnapshot): at the session's first provision only, when its volume
   * does not exist yet, the volume is made (labelled with the storage it is seeded from; the
   * provider adopts it, session-network.ts) and the snapshot copied in before any container of
   * the session mounts it, so the agent finds its files and conversation when it starts. A volume
   * already there is never copied into again (a resume). Resolves once the volume is there, to
   * the storage the volume was seeded from when that is the spec's seed (now, or by an earlier
   * provision whose answer the server may not have taken: said again, like a seeded commit), else
   * undefined; with `copied`, which settles when the copy has ended: the caller prepares the rest
   * of the workload meanwhile and mounts the volume only after it. A failed copy removes the
   * volume again (then `copied` rejects), so a retried provision seeds anew.
   */
  async seed(spec: SessionSpec): Promise<{ storage: string; copied: Promise<void> } | undefined> {
    const source = spec.seedSnapshot;
    if (!source) return undefined;
    const inputs = sessionVolumeInputs(spec);
    const image = this.#image("seed a fork from a snapshot");
    const existing = await this.#docker
      .getVolume(inputs.name)
      .inspect()
      .catch((error: { statusCode?: number }) => {
        if (error.statusCode === 404) return undefined;
        throw error;
      });
    if (existing)
      return existing.Labels?.[SEEDED_FROM_LABEL] === source.storage
        ? { storage: source.storage, copied: Promise.resolve() }
        : undefined;
    await this.#mustExist(source);
    // Labels beyond the declared ones: the provider adopts a volume that is ours (managed-by).
    await this.#docker.createVolume({
      Name: inputs.name,
      Labels: { ...inputs.labels, [SEEDED_FROM_LABEL]: source.storage },
    });
    const copied = this.#copy(image, inputs.name.replace(/-workspace$/, ""), "seed", REPLACE_SCRIPT, [
      { volume: source.storage, target: "/source", readOnly: true },
      { volume: inputs.name, target: "/workspace", readOnly: false },
    ]).then(
      () => undefined,
      async (error: unknown) => {
        await removeVolume(this.#docker, inputs.name);
        throw error;
      },
    );
    // Awaited by the caller; a failure before it is (it is busy elsewhere) is not unhandled.
    copied.catch(() => undefined);
    return { storage: source.storage, copied };
  }

  /** Settles once every recording and copy container removal started so far has (tests; a runner stopping). */
  async settled(): Promise<void> {
    await Promise.all([...this.#recordings.values(), this.copiesRemoved()]);
  }

  /** Settles once every copy container being removed behind an answer is gone (never rejects). */
  async copiesRemoved(): Promise<void> {
    await Promise.all([...this.#removals]);
  }

  #removeBehind(removal: Promise<void>): void {
    this.#removals.add(removal);
    void removal.finally(() => this.#removals.delete(removal));
  }

  /** The snapshot's stack records the volume already made (the provider adopts it), never delaying the answer. */
  #record(target: SnapshotStorage): void {
    const stacks = this.#stacks;
    if (!stacks) return;
    const previous = this.#recordings.get(target.storage) ?? Promise.resolve();
    const recording = previous
      .then(() => stacks.upSnapshot({ engine: "docker", target }, { recordOnly: true }))
      .catch((error: unknown) => {
        this.#log("warn", "recording a snapshot's stack failed", {
          storage: target.storage,
          error: String((error as Error).message ?? error).slice(0, 500),
        });
      })
      .finally(() => {
        if (this.#recordings.get(target.storage) === recording) this.#recordings.delete(target.storage);
      });
    this.#recordings.set(target.storage, recording);
  }

  #image(what: string): string {
    if (!this.#gitImage) throw noGitImage(what);
    return this.#gitImage;
  }

  async #mustExist(target: SnapshotStorage): Promise<void> {
    if (!(await volumeExists(this.#docker, target.storage)))
      throw new CodedError(
        "NOT_FOUND",
        `snapshot ${target.namespace}/${target.name} has no storage ${target.storage} on this engine`,
      );
  }

  /** The snapshot's volume, labelled; ALREADY_EXISTS when a volume of the name is there. */
  async #create(target: SnapshotStorage): Promise<void> {
    if (await volumeExists(this.#docker, target.storage))
      throw new CodedError(
        "ALREADY_EXISTS",
        `the storage ${target.storage} of snapshot ${target.namespace}/${target.name} exists`,
      );
    // The stack's own inputs (infra/docker/snapshot.ts declares them): its recording adopts the volume.
    const inputs = snapshotVolumeInputs(target);
    await this.#docker.createVolume({ Name: inputs.name, Labels: inputs.labels });
  }

  /** Runs a copy to its end; its stdout, or the copy's error. */
  async #copy(
    image: string,
    base: string,
    what: string,
    script: string,
    mounts: Mount[],
    signal?: AbortSignal,
    args: string[] = [],
  ): Promise<string> {
    const began = performance.now();
    const run = await this.#start(image, base, what, script, mounts, args);
    const started = performance.now();
    const stop = () => void run.remove();
    if (signal?.aborted) stop();
    signal?.addEventListener("abort", stop, { once: true });
    let done = false;
    try {
      const out = collect(run.stdout);
      const code = await withTimeout(run.exit, COPY_TIMEOUT_MS);
      signal?.throwIfAborted();
      if (code !== 0) throw copyFailed(what, mounts.at(-1)?.volume ?? base, code, run.stderr());
      const text = await out;
      // Nothing but a fallback's notice is written there by a copy that ended well.
      if (run.stderr().trim())
        this.#log("warn", "snapshot copy notice", { what, stderr: run.stderr().trim().slice(0, 300) });
      done = true;
      return text;
    } finally {
      signal?.removeEventListener("abort", stop);
      this.#log("info", "snapshot copy done", {
        what,
        start_ms: Math.round(started - began),
        run_ms: Math.round(performance.now() - started),
      });
      // A copy that ended well is removed behind the answer (what mounts its volumes next waits
      // for nothing of it; a removal of those volumes waits for it: `#copiesRemoved`); a failed
      // one before the error goes (its caller removes the volume it wrote next).
      if (done) this.#removeBehind(run.remove());
      else await run.remove();
    }
  }

  /** A hardened container of the git image with `mounts` only, started, stdout streamed. */
  #start(
    image: string,
    base: string,
    what: string,
    script: string,
    mounts: Mount[],
    args: string[] = [],
  ): Promise<ShortLivedRun> {
    return startShortLived(this.#docker, copyContainerOptions(image, base, what, script, mounts, args));
  }
}

/** A hardened container of the git image with `mounts` only (module doc). */
function copyContainerOptions(
  image: string,
  base: string,
  what: string,
  script: string,
  mounts: Mount[],
  args: string[] = [],
): Docker.ContainerCreateOptions {
  return {
    name: `${base}-snap-${what}-${randomBytes(3).toString("hex")}`,
    Image: image,
    Entrypoint: ["/bin/sh", "-c", script, "sh", ...args],
    Cmd: [],
    User: "65532:65532",
    WorkingDir: "/tmp",
    Labels: { [Labels.managedBy]: "agent-sessions" },
    HostConfig: shortLivedHostConfig({
      network: "none",
      mounts: mounts.map((m) => ({
        Type: "volume",
        Source: m.volume,
        Target: m.target,
        ReadOnly: m.readOnly,
      })),
      // A restore's lists of the two trees (volume-sync-script.ts); past it, the full replace.
      tmpMiB: 64,
      memoryMiB: 256,
      pids: 64,
    }),
  };
}

/**
 * The container an import is extracted through (`write`): never started, only there for dockerd's
 * `PUT …/archive` to mount the storage at `/volume`. Its root file system is left writable because
 * dockerd refuses an extract at `/` into a read-only one even when every entry lands in a mount;
 * nothing runs in it, and it is removed after.
 */
function extractContainerOptions(image: string, storage: string): Docker.ContainerCreateOptions {
  const options = copyContainerOptions(image, storage, "import", "true", [
    { volume: storage, target: "/volume", readOnly: false },
  ]);
  return { ...options, HostConfig: { ...options.HostConfig, ReadonlyRootfs: false } };
}

function workspaceVolume(containerName: string): string {
  return `${containerName}-workspace`;
}

async function volumeExists(docker: Docker, name: string): Promise<boolean> {
  return docker
    .getVolume(name)
    .inspect()
    .then(
      () => true,
      (error: { statusCode?: number }) => {
        if (error.statusCode === 404) return false;
        throw error;
      },
    );
}

/** Removes a volume; true when it was there. */
async function removeVolume(docker: Docker, name: string): Promise<boolean> {
  try {
    await docker.getVolume(name).remove();
    return true;
  } catch (error) {
    if ((error as { statusCode?: number }).statusCode === 404) return false;
    throw error;
  }
}

async function collect(stream: NodeJS.ReadableStream): Promise<string> {
  let text = "";
  for await (const chunk of stream) if (text.length < 1000) text += String(chunk);
  return text;
}

function parseSize(out: string): number {
  const size = Number(out.trim().split("\n").at(-1));
  if (!Number.isSafeInteger(size) || size < 0)
    throw new CodedError(
      "INTERNAL",
      `the snapshot copy reported no size (${JSON.stringify(out.slice(0, 100))})`,
    );
  return size;
}

function withTimeout(exit: Promise<number>, ms: number): Promise<number> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    exit,
    new Promise<number>((resolve) => {
      timer = setTimeout(() => resolve(-1), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}

/** The copy's error; its stderr names paths of the volume only (no secrets live there). */
function copyFailed(what: string, volume: string, code: number, stderr: string): CodedError {
  const why = code === -1 ? `timed out after ${COPY_TIMEOUT_MS / 1000} s` : `exit ${code}`;
  return new CodedError(
    "INTERNAL",
    `the snapshot ${what} of ${volume} failed (${why}): ${stderr.trim().slice(0, 1000)}`,
  );
}
