/**
 * Snapshots on Kubernetes (issue 38, contracts/session-snapshot.ts; the interface is
 * runner/engine/driver.ts's SessionSnapshots). A snapshot's storage is a PVC named
 * `target.storage` in the sessions namespace (infra/kubernetes/snapshot-manifest.ts, the builder its
 * stack declares it from), made at
 * once through the API and then recorded by its own stack in the background
 * (`upSnapshot(…, {recordOnly})`, never delaying the answer).
 *
 * Every copy runs in a short-lived pod of the runner's git image (the session pods' `workspace`
 * sidecar image: sh, GNU tar, cp, find) hardened like a session pod, with no network and nothing
 * mounted but the two PVCs; the runner execs the copy into it (runner/kubernetes/exec.ts) and
 * deletes it whatever happened. On one node a ReadWriteOnce volume mounts in both the session pod
 * and the copy pod, so a take does not stop the workload (Kubernetes has no pause to keep).
 *
 * Files are copied with `cp -a` as uid 65532, the session's own user: modes, timestamps, symlinks
 * (as links) and ownership (65532 to 65532) are kept. The volume's root itself is the provisioner's
 * and is never copied; its entries are.
 *
 * A fork's seed (`seed`): at a session's first provision (no stack, no Deployment yet) the session's
 * PVC is made as its stack declares it (infra/kubernetes/manifests.ts, applied under the runner's
 * field manager as a fast create does) and filled from the snapshot before any pod of the session
 * starts; the provision then goes on as usual and its `up` adopts the PVC.
 */
import { once } from "node:events";
import { randomBytes } from "node:crypto";
import {
  type AppsV1Api,
  type CoreV1Api,
  type NetworkingV1Api,
  PatchStrategy,
  setHeaderOptions,
  type V1Pod,
} from "@kubernetes/client-node";
import { AwakeDeadline } from "../../contracts/awake-deadline.ts";
import { CodedError } from "../../contracts/errors.ts";
import { SnapshotLabels } from "../../contracts/session-snapshot.ts";
import { type SessionSpec, SnapshotStackSpec, type SnapshotStorage } from "../../contracts/session-spec.ts";
import { sessionManifests, sessionObjectNames } from "../../infra/kubernetes/manifests.ts";
import {
  COPY_CONTAINER,
  type CopyMount,
  copyNetworkPolicyManifest,
  copyPodManifest,
} from "../../infra/kubernetes/copy-pod.ts";
import {
  DEFAULT_SNAPSHOT_STORAGE_REQUEST,
  snapshotPvcManifest,
} from "../../infra/kubernetes/snapshot-manifest.ts";
import type { SessionSnapshots, WorkspaceUpload } from "../engine/driver.ts";
import type { DriverLog } from "../engine/fast-path.ts";
import { Prepared } from "../engine/prepared.ts";
import { REPLACE_FUNCTION, VOLUME_SYNC_SCRIPT } from "../engine/volume-sync-script.ts";
import { type ExecStream, openStdin, type PodExec } from "./exec.ts";
import { PodFailures } from "./pod-failure.ts";
import { isApiStatus } from "./pod-watch.ts";
import { RUNNER_FIELD_MANAGER } from "./scale.ts";

/**
 * What a snapshot's stack offers (stacks/stack-manager.ts): an `up` of the snapshot stack's
 * program, `recordOnly` adopting the PVC the runner made, and its destroy (false: no stack).
 */
export type SnapshotStacks = {
  upSnapshot(spec: SnapshotStackSpec, opts?: { recordOnly?: boolean }): Promise<unknown>;
  destroySnapshot(namespace: string, name: string): Promise<boolean>;
};

export type KubernetesSnapshotsOptions = {
  core: CoreV1Api;
  apps: AppsV1Api;
  networking: NetworkingV1Api;
  exec: PodExec;
  stacks: SnapshotStacks;
  /** The sessions namespace: snapshot PVCs and copy pods live there beside the session PVCs. */
  namespace: string;
  /** The runner's git image (digest-pinned): the copy pods'. */
  image: string;
  /** Makes the sessions namespace when it is not there yet (an import on a fresh runner). */
  ensureNamespace: () => Promise<void>;
  /** The session's pods (any phase): a restore waits for them to be gone. */
  sessionPods: (containerName: string) => Promise<V1Pod[]>;
  log?: DriverLog;
  /** How long a copy pod may take to run. @default 120000 */
  startTimeoutMs?: number;
};

/** How long a restore waits for the session's last pod to go after a stop. */
const PODS_GONE_MS = 30_000;
/** How long a restore's copy pod started ahead (`prepareRestore`) waits for its restore. */
const PREPARED_MS = 60_000;
const POLL_MS = 100;
const MiB = 1024 * 1024;
/** The largest piece of an upload written to the exec's stdin at once. */
const STDIN_PIECE_BYTES = 256 * 1024;

/** The copy pod's mount points. */
const FROM = "/from";
const TO = "/to";
const VOLUME = "/volume";

/** Prints the apparent size of every regular file under `$1`, one a line (summed by the runner). */
const SIZES = `sizes() { find "$1" -type f -printf '%s\\n'; }`;

/** `sh -c` scripts run in the copy pod. */
const SCRIPTS = {
  /**
   * Copies FROM's entries into TO; when `$1` is "replace", TO is made what FROM holds, only what
   * differs removed and copied (runner/engine/volume-sync-script.ts, whose text is `$2`).
   */
  copy: `set -eu
VOLUME_SYNC=$2
${REPLACE_FUNCTION}
${SIZES}
if [ "$1" = replace ]; then
  replace ${FROM} ${TO} /tmp
else
  cd ${FROM}
  find . -mindepth 1 -maxdepth 1 -exec cp -a -t ${TO} -- {} +
fi
sizes ${TO}`,
  /**
   * A tar of the volume, every entry under `volume/`: regular files, directories and symlinks only
   * (what an import accepts), hard links stored as files.
   */
  read: `set -eu
cd /
find volume \\( -type f -o -type d -o -type l \\) -print0 |
  tar --null --no-recursion --hard-dereference --numeric-owner -T - -cf -`,
  /**
   * Extracts exactly `$1` bytes of tar from stdin into the volume (`volume/` stripped; the root
   * entry is then empty and skipped), modes kept, then the sizes.
   */
  write: `set -eu
${SIZES}
head -c "$1" | tar -xpf - -C ${VOLUME} --strip-components=1 --no-same-owner
sizes ${VOLUME}`,
} as const;

/** The sum of `sizes` lines. */
export function summedSizes(text: string): number {
  let total = 0;
  for (const line of text.split("\n")) if (line) total += Number(line);
  return total;
}

/** A quantity the snapshot stack accepts (SnapshotStackSpec.storageRequest), else undefined. */
function storageQuantity(value: string | undefined): string | undefined {
  return value && /^[0-9]+(Ki|Mi|Gi|Ti)?$/.test(value) ? value : undefined;
}

/** An import's storage request: the default, or the archive's size with room for the file system. */
export function importStorageRequest(tarBytes: number): string {
  const mib = Math.ceil((tarBytes * 1.25) / MiB) + 64;
  return mib <= 1024 ? DEFAULT_SNAPSHOT_STORAGE_REQUEST : `${mib}Mi`;
}

type CopyPod = { name: string; remove: () => Promise<void> };

export class KubernetesSnapshots implements SessionSnapshots {
  readonly #o: KubernetesSnapshotsOptions;
  readonly #log: DriverLog;
  /** The background recording of each storage's stack, by storage name. */
  readonly #recordings = new Map<string, Promise<void>>();
  /** Restores' copy pods started ahead, by workspace, tagged with the snapshot's storage. */
  readonly #prepared = new Prepared<CopyPod>(PREPARED_MS, (pod) => pod.remove());

  constructor(options: KubernetesSnapshotsOptions) {
    this.#o = options;
    this.#log = options.log ?? (() => undefined);
  }

  /** Resolves once the stack of `storage` is recorded (or its recording failed; at once if none). */
  async settled(storage: string): Promise<void> {
    await this.#recordings.get(storage);
  }

  async take(
    containerName: string,
    target: SnapshotStorage,
    signal?: AbortSignal,
  ): Promise<{ sizeBytes: number }> {
    const source = await this.#sessionPvc(containerName);
    const spec = this.#stackSpec(
      target,
      source.spec?.storageClassName,
      storageQuantity(source.spec?.resources?.requests?.storage),
    );
    await this.#createPvc(spec);
    try {
      const sizeBytes = await this.#copy(
        "take",
        { claimName: source.metadata?.name ?? "", mountPath: FROM, readOnly: true },
        { claimName: target.storage, mountPath: TO, readOnly: false },
        "into",
        target,
        signal,
      );
      this.#record(spec);
      return { sizeBytes };
    } catch (error) {
      await this.#deletePvc(target.storage);
      throw error;
    }
  }

  async remove(target: SnapshotStorage): Promise<boolean> {
    // A recording still running ends first: its `up` would otherwise make the PVC again.
    await this.settled(target.storage);
    const destroyed = await this.#o.stacks
      .destroySnapshot(target.namespace, target.name)
      .catch((e: unknown) => {
        if ((e as { code?: string }).code === "NOT_FOUND") return false;
        throw e;
      });
    // Made but not recorded yet (a recording cut short by a restart), or left by the destroy.
    const deleted = await this.#deletePvc(target.storage);
    return destroyed || deleted;
  }

  async read(
    target: SnapshotStorage,
    maxBytes: number,
    signal?: AbortSignal,
  ): Promise<AsyncIterable<Buffer>> {
    await this.#snapshotPvc(target);
    const pod = await this.#startPod(
      "read",
      [{ claimName: target.storage, mountPath: VOLUME, readOnly: true }],
      target,
      signal,
    );
    let run: ExecStream;
    try {
      run = await this.#o.exec.stream(pod.name, COPY_CONTAINER, ["/bin/sh", "-c", SCRIPTS.read]);
    } catch (error) {
      await pod.remove();
      throw error;
    }
    const onAbort = () => run.close();
    signal?.addEventListener("abort", onAbort, { once: true });
    const log = this.#log;
    return (async function* () {
      let size = 0;
      try {
        for await (const chunk of run.stdout) {
          const piece = chunk as Buffer;
          size += piece.length;
          if (size > maxBytes) {
            run.close();
            throw new CodedError(
              "RESOURCE_EXHAUSTED",
              `snapshot ${target.name} is larger than ${maxBytes} bytes as a tar`,
            );
          }
          yield piece;
        }
        if (signal?.aborted)
          throw new CodedError("CANCELLED", `reading snapshot ${target.name} was cancelled`);
        const code = await run.exit;
        if (code !== 0) {
          log("warn", "a snapshot read failed", {
            storage: target.storage,
            exit: code,
            stderr: run.stderr().slice(0, 500),
          });
          throw new CodedError("INTERNAL", `reading snapshot ${target.name} failed (exit ${code})`);
        }
      } finally {
        signal?.removeEventListener("abort", onAbort);
        run.close();
        await pod.remove();
      }
    })();
  }

  async write(target: SnapshotStorage, upload: WorkspaceUpload): Promise<{ sizeBytes: number }> {
    await this.#o.ensureNamespace();
    const spec = this.#stackSpec(target, undefined, importStorageRequest(upload.size));
    await this.#createPvc(spec);
    try {
      const pod = await this.#startPod(
        "write",
        [{ claimName: target.storage, mountPath: VOLUME, readOnly: false }],
        target,
      );
      let out: string;
      try {
        out = await this.#run(
          pod.name,
          [SCRIPTS.write, String(upload.size)],
          `importing snapshot ${target.name}`,
          upload,
        );
      } finally {
        await pod.remove();
      }
      this.#record(spec);
      return { sizeBytes: summedSizes(out) };
    } catch (error) {
      await this.#deletePvc(target.storage);
      throw error;
    }
  }

  /**
   * Starts the copy pod of a restore of `source` into the workspace ahead, while the server still
   * stops the session (it mounts both volumes and runs nothing until `restore` execs the copy):
   * `restore` takes it, else it is deleted after PREPARED_MS. Never throws (a failed start is
   * logged; the restore then starts its own).
   */
  prepareRestore(containerName: string, source: SnapshotStorage): void {
    const starting = (async () => {
      const [session] = await Promise.all([this.#sessionPvc(containerName), this.#snapshotPvc(source)]);
      return this.#startPod("restore", this.#restoreMounts(source, session.metadata?.name ?? ""), source);
    })();
    starting.catch((error: unknown) =>
      this.#log("warn", "starting a restore's copy pod ahead failed; the restore starts its own", {
        container: containerName,
        error: (error as Error).message.slice(0, 300),
      }),
    );
    this.#prepared.put(containerName, source.storage, starting);
  }

  async restore(containerName: string, source: SnapshotStorage): Promise<void> {
    const prepared = this.#prepared.take(containerName, source.storage);
    const t0 = performance.now();
    let sessionClaim: string;
    try {
      const [session] = await Promise.all([this.#sessionPvc(containerName), this.#snapshotPvc(source)]);
      sessionClaim = session.metadata?.name ?? "";
      const deployment = await this.#o.apps
        .readNamespacedDeployment({ name: containerName, namespace: this.#o.namespace })
        .catch((e: unknown) => {
          if (isApiStatus(e, 404)) return undefined;
          throw e;
        });
      if ((deployment?.spec?.replicas ?? 0) !== 0)
        throw new CodedError(
          "FAILED_PRECONDITION",
          `workspace ${containerName} is running; stop it (scale it to 0) before restoring a snapshot into it`,
        );
    } catch (error) {
      await prepared?.then(
        (pod) => pod.remove(),
        () => undefined,
      );
      throw error;
    }
    const mounts = this.#restoreMounts(source, sessionClaim);
    // The copy pod (started ahead, else now) starts while the stopped session's last pod goes; it
    // copies once that is gone.
    let podsGoneMs = 0;
    const podsGone = this.#podsGone(containerName).then(() => {
      podsGoneMs = performance.now() - t0;
    });
    await this.#copy(
      "restore",
      mounts[0],
      mounts[1],
      "replace",
      source,
      undefined,
      podsGone,
      prepared?.catch(() => this.#startPod("restore", mounts, source)),
    );
    this.#log("info", "snapshot restore timings", {
      container: containerName,
      started_ahead: prepared !== undefined,
      pods_gone_ms: Math.round(podsGoneMs),
      ms: Math.round(performance.now() - t0),
    });
  }

  /** A restore's mounts: the snapshot read-only at FROM, the session's volume at TO. */
  #restoreMounts(source: SnapshotStorage, sessionClaim: string): [CopyMount, CopyMount] {
    return [
      { claimName: source.storage, mountPath: FROM, readOnly: true },
      { claimName: sessionClaim, mountPath: TO, readOnly: false },
    ];
  }

  /**
   * A fork's seed at the session's first provision (`spec` as the stack will declare it): when the
   * session has no stack and no Deployment yet, makes its PVC and copies `spec.seedSnapshot` into
   * it (emptying what an earlier, failed attempt left); the storage's name, or undefined when it
   * copied nothing (seeded before: a resume never re-seeds). `hasStack`: whether the session's
   * stack exists (then nothing is seeded); the driver judges the session there first, so a refusal
   * of the pack (PolicyViolationError) makes nothing.
   */
  async seed(
    containerName: string,
    spec: SessionSpec,
    hasStack: () => Promise<boolean>,
  ): Promise<string | undefined> {
    const seed = spec.seedSnapshot;
    if (!seed) return undefined;
    const namespace = this.#o.namespace;
    const deployment = await this.#o.apps.readNamespacedDeployment({ name: containerName, namespace }).then(
      () => true,
      (e: unknown) => {
        if (isApiStatus(e, 404)) return false;
        throw e;
      },
    );
    if (deployment || (await hasStack())) return undefined;
    await this.#snapshotPvc(seed);
    const { pvc } = sessionManifests(spec, []);
    await this.#o.core.patchNamespacedPersistentVolumeClaim(
      { name: pvc.metadata.name, namespace, body: pvc, fieldManager: RUNNER_FIELD_MANAGER, force: true },
      setHeaderOptions("Content-Type", PatchStrategy.ServerSideApply),
    );
    await this.#copy(
      "seed",
      { claimName: seed.storage, mountPath: FROM, readOnly: true },
      { claimName: sessionObjectNames(spec).pvc, mountPath: TO, readOnly: false },
      "replace",
      seed,
    );
    return seed.storage;
  }

  /** The snapshot stack's spec of `target` in this runner's sessions namespace. */
  #stackSpec(
    target: SnapshotStorage,
    storageClassName: string | undefined,
    storageRequest: string | undefined,
  ) {
    const className = target.kubernetes?.storageClassName ?? storageClassName;
    return SnapshotStackSpec.parse({
      engine: "kubernetes",
      target: {
        ...target,
        kubernetes: { namespace: this.#o.namespace, ...(className ? { storageClassName: className } : {}) },
      },
      ...(storageRequest ? { storageRequest } : {}),
    });
  }

  /** Records the storage's stack behind the answer; a failure is logged (remove still finds the PVC by name). */
  #record(spec: SnapshotStackSpec): void {
    const storage = spec.target.storage;
    const previous = this.#recordings.get(storage) ?? Promise.resolve();
    const recording = previous
      .then(async () => {
        await this.#o.stacks.upSnapshot(spec, { recordOnly: true });
      })
      .catch((error: unknown) =>
        this.#log("warn", "recording a snapshot's stack failed", {
          storage,
          error: (error as Error).message.slice(0, 500),
        }),
      )
      .finally(() => {
        if (this.#recordings.get(storage) === recording) this.#recordings.delete(storage);
      });
    this.#recordings.set(storage, recording);
  }

  async #createPvc(spec: SnapshotStackSpec): Promise<void> {
    try {
      await this.#o.core.createNamespacedPersistentVolumeClaim({
        namespace: this.#o.namespace,
        body: snapshotPvcManifest(spec),
      });
    } catch (e) {
      if (isApiStatus(e, 409))
        throw new CodedError("ALREADY_EXISTS", `snapshot storage ${spec.target.storage} already exists`);
      throw e;
    }
  }

  /** Deletes a PVC; false when it was not there. */
  async #deletePvc(name: string): Promise<boolean> {
    try {
      await this.#o.core.deleteNamespacedPersistentVolumeClaim({ name, namespace: this.#o.namespace });
      return true;
    } catch (e) {
      if (isApiStatus(e, 404)) return false;
      throw e;
    }
  }

  async #sessionPvc(containerName: string) {
    const name = `${containerName}-workspace`;
    try {
      return await this.#o.core.readNamespacedPersistentVolumeClaim({ name, namespace: this.#o.namespace });
    } catch (e) {
      if (isApiStatus(e, 404)) throw new CodedError("NOT_FOUND", `workspace ${containerName} has no volume`);
      throw e;
    }
  }

  async #snapshotPvc(target: SnapshotStorage) {
    try {
      const pvc = await this.#o.core.readNamespacedPersistentVolumeClaim({
        name: target.storage,
        namespace: this.#o.namespace,
      });
      if (!pvc.metadata?.deletionTimestamp) return pvc;
    } catch (e) {
      if (!isApiStatus(e, 404)) throw e;
    }
    throw new CodedError("NOT_FOUND", `snapshot storage ${target.storage} not found`);
  }

  /** Waits (bounded) for every pod of the stopped session to be gone: none may write meanwhile. */
  async #podsGone(containerName: string): Promise<void> {
    const deadline = new AwakeDeadline(PODS_GONE_MS);
    while ((await this.#o.sessionPods(containerName)).length > 0) {
      if (deadline.passed())
        throw new CodedError(
          "FAILED_PRECONDITION",
          `a pod of workspace ${containerName} is still there; retry once the session is stopped`,
        );
      await new Promise((r) => setTimeout(r, POLL_MS));
    }
  }

  /**
   * One copy from `from` into `to` in a copy pod (`started`, one started ahead with these mounts,
   * else one started now), once `before` resolved (awaited while the pod starts); the sizes of
   * what `to` then holds, summed.
   */
  async #copy(
    what: string,
    from: CopyMount,
    to: CopyMount,
    mode: "into" | "replace",
    target: SnapshotStorage,
    signal?: AbortSignal,
    before?: Promise<void>,
    started?: Promise<CopyPod>,
  ): Promise<number> {
    const starting = started ?? this.#startPod(what, [from, to], target, signal);
    let pod: CopyPod;
    try {
      [pod] = await Promise.all([starting, before]);
    } catch (error) {
      await starting.then(
        (p) => p.remove(),
        () => undefined,
      );
      throw error;
    }
    try {
      return summedSizes(
        await this.#run(
          pod.name,
          [SCRIPTS.copy, mode, VOLUME_SYNC_SCRIPT],
          `copying snapshot ${target.name}`,
          undefined,
          signal,
        ),
      );
    } finally {
      await pod.remove();
    }
  }

  /** Runs a script of SCRIPTS in the copy pod (stdin from `upload`); its stdout, or a coded error. */
  async #run(
    podName: string,
    [script, ...args]: [string, ...string[]],
    what: string,
    upload?: WorkspaceUpload,
    signal?: AbortSignal,
  ): Promise<string> {
    const stdin = upload ? openStdin() : undefined;
    const run = await this.#o.exec.stream(podName, COPY_CONTAINER, ["/bin/sh", "-c", script, "sh", ...args], {
      ...(stdin ? { stdin } : {}),
    });
    const onAbort = () => run.close();
    signal?.addEventListener("abort", onAbort, { once: true });
    try {
      const chunks: Buffer[] = [];
      const output = (async () => {
        for await (const chunk of run.stdout) chunks.push(chunk as Buffer);
      })();
      if (upload && stdin) {
        // In pieces: one websocket message per write, and the kubelet's stream takes large ones badly.
        for await (const chunk of upload.open())
          for (let at = 0; at < chunk.length; at += STDIN_PIECE_BYTES)
            if (!stdin.write(chunk.subarray(at, at + STDIN_PIECE_BYTES))) await once(stdin, "drain");
      }
      await output;
      const code = await run.exit;
      if (signal?.aborted) throw new CodedError("CANCELLED", `${what} was cancelled`);
      if (code !== 0) {
        // Raw stderr stays in the runner's log (file names, not secrets); the answer says what failed.
        this.#log("warn", `${what} failed`, { exit: code, stderr: run.stderr().slice(0, 1000) });
        throw new CodedError("INTERNAL", `${what} failed in its copy pod (exit ${code})`);
      }
      // Nothing but a fallback's notice (volume-sync-script.ts) is written there by a copy that ended well.
      if (run.stderr().trim())
        this.#log("warn", `${what}: notice`, { stderr: run.stderr().trim().slice(0, 300) });
      return Buffer.concat(chunks).toString("utf8");
    } finally {
      signal?.removeEventListener("abort", onAbort);
      run.close();
    }
  }

  /**
   * Makes a copy pod with `mounts` and waits until its container runs; deleted by `remove`, which
   * logs how long it took to start and how long it worked (`what` it did).
   */
  async #startPod(
    what: string,
    mounts: CopyMount[],
    target: SnapshotStorage,
    signal?: AbortSignal,
  ): Promise<CopyPod> {
    const t0 = performance.now();
    let running = t0;
    const namespace = this.#o.namespace;
    const name = `ss-copy-${randomBytes(5).toString("hex")}`;
    const body = copyPodManifest({
      name,
      namespace,
      image: this.#o.image,
      mounts,
      labels: { [SnapshotLabels.namespace]: target.namespace, [SnapshotLabels.snapshot]: target.name },
    });
    // Its NetworkPolicy first: the pod never runs without it.
    await this.#o.networking.createNamespacedNetworkPolicy({
      namespace,
      body: copyNetworkPolicyManifest(name, namespace),
    });
    const removePolicy = () =>
      this.#o.networking.deleteNamespacedNetworkPolicy({ name, namespace }).catch((e: unknown) => {
        if (!isApiStatus(e, 404))
          this.#log("warn", "deleting a copy pod's NetworkPolicy failed", {
            pod: name,
            error: (e as Error).message.slice(0, 300),
          });
      });
    try {
      await this.#o.core.createNamespacedPod({ namespace, body });
    } catch (error) {
      await removePolicy();
      throw error;
    }
    const remove = async () => {
      this.#log("info", "snapshot copy pod done", {
        what,
        pod: name,
        start_ms: Math.round(running - t0),
        work_ms: Math.round(performance.now() - running),
      });
      const removePod = this.#o.core
        .deleteNamespacedPod({ name, namespace, gracePeriodSeconds: 0 })
        .catch((e: unknown) => {
          if (!isApiStatus(e, 404))
            this.#log("warn", "deleting a copy pod failed", {
              pod: name,
              error: (e as Error).message.slice(0, 300),
            });
        });
      await Promise.all([removePod, removePolicy()]);
    };
    try {
      await this.#waitRunning(name, signal);
      running = performance.now();
    } catch (error) {
      await remove();
      throw error;
    }
    return { name, remove };
  }

  async #waitRunning(name: string, signal?: AbortSignal): Promise<void> {
    const deadline = new AwakeDeadline(this.#o.startTimeoutMs ?? 120_000);
    const failures = new PodFailures();
    for (;;) {
      const pod = await this.#o.core.readNamespacedPod({ name, namespace: this.#o.namespace });
      const state = pod.status?.containerStatuses?.find((c) => c.name === COPY_CONTAINER)?.state;
      if (pod.status?.phase === "Running" && state?.running) return;
      if (pod.status?.phase === "Failed" || pod.status?.phase === "Succeeded" || state?.terminated)
        throw new CodedError("INTERNAL", `copy pod ${name} ended before its copy`);
      const failure = failures.check([pod]);
      if (failure) throw failure;
      // The kubelet reports a started container at its next relist (up to a second later): once
      // the pod is on its node, an exec that answers says it runs already.
      if (pod.spec?.nodeName && (await this.#answers(name))) return;
      if (signal?.aborted) throw new CodedError("CANCELLED", `copy pod ${name} was cancelled`);
      if (deadline.passed()) throw new CodedError("DEADLINE_EXCEEDED", `copy pod ${name} did not start`);
      await new Promise((r) => setTimeout(r, POLL_MS));
    }
  }

  /** Whether `true` runs in the copy pod's container (it has started). */
  async #answers(name: string): Promise<boolean> {
    try {
      const run = await this.#o.exec.stream(name, COPY_CONTAINER, ["true"]);
      run.stdout.resume();
      return (await run.exit) === 0;
    } catch {
      return false;
    }
  }
}
