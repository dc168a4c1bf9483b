/**
 * The Kubernetes driver's exits: a watch on the session pods (relisting after a cut) whose pod
 * objects PodExits turns into exit reports.
 */
import {
  type CoreV1Api,
  type KubeConfig,
  type V1ContainerStateTerminated,
  type V1Pod,
  type V1Status,
  Watch,
} from "@kubernetes/client-node";
import { CodedError } from "../../contracts/errors.ts";
import { WORKSPACE_CONTAINER } from "../../contracts/session-pod.ts";
import { Labels, workloadName } from "../../contracts/session-spec.ts";
import type { ExitReason } from "../engine/driver.ts";
import type { DriverLog } from "../engine/fast-path.ts";

export type OnExit = (containerName: string, reason: ExitReason, detail: string) => void;

const WATCH_RETRY_MS = 1000;

/** How long a starting runner waits for the API server to answer its first list. */
export const API_SERVER_START_WAIT_MS = 60_000;

/**
 * `first()` retried while the API server cannot be reached (a connection refused or cut, the
 * answer "fetch failed"): a runner pod may start before the cluster's network routes its service
 * address, or while the API server restarts. An API server that answers with an error (401, 403)
 * fails at once. Past `waitMs` the error names the server and what to check.
 */
export async function whenApiServerAnswers<T>(
  first: () => Promise<T>,
  options: { server: string; log: DriverLog; waitMs?: number; retryMs?: number },
): Promise<T> {
  const deadline = Date.now() + (options.waitMs ?? API_SERVER_START_WAIT_MS);
  let delay = options.retryMs ?? 500;
  for (let attempt = 1; ; attempt++) {
    try {
      return await first();
    } catch (error) {
      if (isApiError(error)) throw error;
      const cause = unreachableCause(error);
      if (Date.now() + delay > deadline)
        throw new CodedError(
          "FAILED_PRECONDITION",
          `the runner cannot start: the Kubernetes API server at ${options.server} did not answer (${cause}); ` +
            "check the kubeconfig's server address (KUBECONFIG, or in a pod its service account and " +
            "KUBERNETES_SERVICE_HOST) and that this machine or pod can reach it",
        );
      options.log("warn", "the Kubernetes API server did not answer; retrying", {
        server: options.server,
        attempt,
        error: cause,
      });
      await new Promise((r) => setTimeout(r, delay));
      delay = Math.min(delay * 2, 5_000);
    }
  }
}

/** An answer from the API server (an ApiException or a watch's HTTP error): it is reachable. */
function isApiError(e: unknown): boolean {
  if (typeof e !== "object" || e === null) return false;
  const { code, statusCode } = e as { code?: unknown; statusCode?: unknown };
  return typeof code === "number" || typeof statusCode === "number";
}

/** "fetch failed" says nothing: its cause (ECONNREFUSED 10.0.0.1:443) says what happened. */
function unreachableCause(e: unknown): string {
  const error = e as { message?: unknown; cause?: { code?: unknown; message?: unknown } };
  const cause = error?.cause;
  if (cause && typeof cause === "object") return String(cause.code ?? cause.message ?? error.message);
  return String(error?.message ?? e);
}

/** True when `e` is an API error (ApiException) or a watch's HTTP error with this status code. */
export function isApiStatus(e: unknown, code: number): boolean {
  if (typeof e !== "object" || e === null) return false;
  const { code: c, statusCode } = e as { code?: unknown; statusCode?: unknown };
  return c === code || statusCode === code;
}

/** What a watch remembers of one pod (by uid): restart counts, terminations already reported. */
type PodMemory = { name: string; restarts: Map<string, number>; seen: Set<string>; gone: boolean };

/**
 * Turns the pod objects a watch (or a relist) delivers into exit reports, at most one per
 * container termination and one per pod going away. The first sight of a pod only records it:
 * what happened before the runner looked is history, not news.
 */
export class PodExits {
  readonly #pods = new Map<string, PodMemory>();
  readonly #quiet: (containerName: string) => boolean;
  readonly #onExit: OnExit;

  /** `quiet(name)`: true while the runner itself scales the workload down or removes it. */
  constructor(quiet: (containerName: string) => boolean, onExit: OnExit) {
    this.#quiet = quiet;
    this.#onExit = onExit;
  }

  observe(type: "ADDED" | "MODIFIED" | "DELETED", pod: V1Pod): void {
    const uid = pod.metadata?.uid;
    const labels = pod.metadata?.labels ?? {};
    const ns = labels[Labels.namespace];
    const session = labels[Labels.session];
    if (!uid || !ns || !session) return;
    const name = workloadName(ns, session);
    let memory = this.#pods.get(uid);
    if (!memory) {
      if (type === "DELETED") return;
      // A pod first seen already going (a scale-down before a runner restart) is history too.
      const gone = Boolean(pod.metadata?.deletionTimestamp) || pod.status?.reason === "Evicted";
      memory = { name, restarts: new Map(), seen: new Set(), gone };
      this.#pods.set(uid, memory);
      this.#containers(pod, memory, () => undefined);
      return;
    }
    if (type === "DELETED") this.#pods.delete(uid);
    if (memory.gone) return;
    const report = (reason: ExitReason, detail: string) => {
      if (!this.#quiet(name)) this.#onExit(name, reason, detail);
    };
    if (type === "DELETED" || pod.metadata?.deletionTimestamp) {
      // Reported when the deletion starts: the containers' own terminations follow from it.
      memory.gone = true;
      report("PodDeleted", `pod ${pod.metadata?.name} deleted`);
      return;
    }
    if (pod.status?.reason === "Evicted") {
      memory.gone = true;
      report("Evicted", pod.status.message ?? `pod ${pod.metadata?.name} evicted`);
      return;
    }
    this.#containers(pod, memory, (t, container) =>
      report(
        t.reason === "OOMKilled" ? "OOMKilled" : "ContainerExited",
        `container ${container} ${t.reason ?? "terminated"} with exit code ${t.exitCode}`,
      ),
    );
  }

  /** A relist after the watch was cut: pods we knew that are no longer there were deleted meanwhile. */
  reconcile(pods: V1Pod[]): void {
    const present = new Set(pods.map((p) => p.metadata?.uid));
    for (const pod of pods) this.observe("MODIFIED", pod);
    for (const [uid, memory] of this.#pods) {
      if (present.has(uid)) continue;
      this.#pods.delete(uid);
      if (memory.gone) continue;
      if (!this.#quiet(memory.name)) this.#onExit(memory.name, "PodDeleted", "pod deleted while unwatched");
    }
  }

  #containers(
    pod: V1Pod,
    memory: PodMemory,
    report: (t: V1ContainerStateTerminated, container: string) => void,
  ): void {
    for (const cs of pod.status?.containerStatuses ?? []) {
      // The workspace sidecar restarts on its own (a git run over its memory limit, say): the
      // session's workload is the adapter, and it lives on.
      if (cs.name === WORKSPACE_CONTAINER) continue;
      const key = (t: V1ContainerStateTerminated) =>
        `${cs.name}/${t.containerID ?? String(t.finishedAt ?? cs.restartCount)}`;
      const current = cs.state?.terminated;
      if (current && !memory.seen.has(key(current))) {
        memory.seen.add(key(current));
        report(current, cs.name);
      }
      const before = memory.restarts.get(cs.name) ?? cs.restartCount;
      const last = cs.lastState?.terminated;
      if (cs.restartCount > before && !(last && memory.seen.has(key(last)))) {
        report(last ?? { exitCode: -1, reason: "Restarted" }, cs.name);
      }
      if (last) memory.seen.add(key(last));
      memory.restarts.set(cs.name, cs.restartCount);
    }
  }
}

/**
 * Watches the session pods of `namespace` and reports their exits (`quiet(name)`: true while the
 * runner itself scales the workload down or removes it). Resolves once watching; the returned
 * function stops it.
 */
export async function watchPodExits(
  kc: KubeConfig,
  core: CoreV1Api,
  namespace: string,
  quiet: (containerName: string) => boolean,
  onExit: OnExit,
  log: DriverLog,
): Promise<() => void> {
  const exits = new PodExits((name) => quiet(name), onExit);
  const labelSelector = `${Labels.managedBy}=agent-sessions`;
  const path = `/api/v1/namespaces/${namespace}/pods`;
  let stopped = false;
  let controller: AbortController | undefined;
  let resourceVersion: string | undefined;
  let retry: NodeJS.Timeout | undefined;

  // A list gives the state and the resourceVersion to watch from; after a cut it also
  // catches up on what happened unwatched (pods keep running while the API server is away,
  // so unlike Docker's event stream a cut watch is no engine restart).
  const relist = async (first: boolean) => {
    const list = await core.listNamespacedPod({ namespace: namespace, labelSelector });
    if (first) for (const pod of list.items) exits.observe("ADDED", pod);
    else exits.reconcile(list.items);
    resourceVersion = list.metadata?.resourceVersion;
  };
  const schedule = (ms: number) => {
    if (stopped || retry) return;
    retry = setTimeout(() => {
      retry = undefined;
      subscribe(false).catch(() => schedule(WATCH_RETRY_MS));
    }, ms);
  };
  const subscribe = async (first: boolean) => {
    if (first || resourceVersion === undefined) await relist(first);
    if (stopped) return;
    controller = await new Watch(kc).watch(
      path,
      {
        labelSelector,
        resourceVersion,
        allowWatchBookmarks: true,
        // The server ends the watch before the client's 30 s inactivity timeout would.
        timeoutSeconds: 25,
      },
      (type: string, obj: V1Pod & V1Status) => {
        if (type === "ERROR") {
          // 410 Gone: our resourceVersion is too old; relist on the next subscribe.
          if (obj.code === 410) resourceVersion = undefined;
          return;
        }
        if (obj.metadata?.resourceVersion) resourceVersion = obj.metadata.resourceVersion;
        if (type === "ADDED" || type === "MODIFIED" || type === "DELETED") exits.observe(type, obj);
      },
      (err: unknown) => {
        if (isApiStatus(err, 410)) resourceVersion = undefined;
        schedule(err ? WATCH_RETRY_MS : 0);
      },
    );
  };
  // The first list waits for an API server that does not answer yet; the watch itself retries.
  const server = kc.getCurrentCluster()?.server ?? "(the kubeconfig's server)";
  await whenApiServerAnswers(() => relist(true), { server, log });
  await subscribe(false).catch(() => schedule(WATCH_RETRY_MS));
  return () => {
    stopped = true;
    if (retry) clearTimeout(retry);
    controller?.abort();
  };
}
