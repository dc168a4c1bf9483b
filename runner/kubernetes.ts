/**
 * The Kubernetes driver: provisioning through the session stack (stacks/, the Kubernetes session
 * program), the agent over a long-lived exec stream (the pods/exec WebSocket), and exits observed
 * through a watch on the session pods.
 *
 * "Running" here means what the runner can use: the Deployment's pod exists, is not being deleted,
 * is in phase Running and passes its readiness probe (condition Ready). A Deployment asking for one
 * replica whose pod is still starting is not running yet.
 *
 * The 1.20 exec protocol (`v4.channel.k8s.io`) has no way to close stdin alone (that came with
 * `v5.channel.k8s.io`, Kubernetes 1.29): stdin stays open for the agent's whole life, and a
 * deliberate stop signals the agent by PID from a second exec (TESTBED.md "Kubernetes").
 */
import { PassThrough } from "node:stream";
import {
  AppsV1Api,
  CoreV1Api,
  Exec,
  type KubeConfig,
  type V1ContainerStateTerminated,
  type V1Pod,
  type V1Status,
  NetworkingV1Api,
  Watch,
} from "@kubernetes/client-node";
import { CodedError } from "../contracts/errors.ts";
import { Labels, type SessionSpec, workloadName } from "../contracts/session-spec.ts";
import type { StackManager } from "../stacks/index.ts";
import {
  type AgentOutput,
  type AgentProcess,
  type EngineDriver,
  type ExitReason,
  outputSettled,
  type ProvisionResult,
} from "./driver.ts";

type Placement = { namespace: string; name: string };
type OnExit = (containerName: string, reason: ExitReason, detail: string) => void;

export type KubernetesDriverOptions = {
  /** Namespace the session objects live in; the watch and RBAC cover this one. @default "agent-sessions" */
  namespace?: string;
  /**
   * CIDR the runner reaches session pods from when it runs outside the cluster (on the node):
   * added to a spec's NetworkPolicy ingress when the spec names none. In-cluster runners are
   * matched by their pod labels instead. @default none
   */
  runnerCidr?: string;
  /**
   * The runner pod's labels, when it runs in the cluster: what a session's NetworkPolicy admits
   * (its ingress podSelector) in place of the spec's runnerSelector. @default the spec's
   */
  podLabels?: Record<string, string>;
  /**
   * Labels of the namespace the runner pod runs in, when that is not the sessions namespace: the
   * ingress peer is then a namespaceSelector and podSelector together. @default none (same namespace)
   */
  namespaceLabels?: Record<string, string>;
  /** How long provision waits for a Ready pod after the stack is up. @default 120000 */
  readyTimeoutMs?: number;
};

/** Marker the exec wrapper writes to stderr before it becomes the agent: the agent's PID. */
const PID_MARKER = "agent-sessions-agent-pid=";
const STOP_GRACE_MS = 5000;
/** How long an ended agent's exit waits for its last output to be taken. */
const OUTPUT_SETTLE_MS = 2_000;
/** How long an agent's SIGKILL waits for a sign of the OOM killer (pod status, cgroup count). */
const OOM_SETTLE_MS = 3000;
/**
 * The container cgroup's count of OOM kills, read inside the container: cgroup v2 `memory.events`,
 * else cgroup v1 `memory.oom_control` (both have an `oom_kill N` line).
 */
const OOM_KILLS = [
  "/bin/sh",
  "-c",
  "cat /sys/fs/cgroup/memory.events 2>/dev/null || cat /sys/fs/cgroup/memory/memory.oom_control",
];

/** The `oom_kill N` count of a cgroup memory.events / memory.oom_control text; undefined when absent. */
export function oomKillsOf(text: string): number | undefined {
  const m = text.match(/^oom_kill (\d+)$/m);
  return m ? Number(m[1]) : undefined;
}
const WATCH_RETRY_MS = 1000;

/** True when `e` is an API error (ApiException) or a watch's HTTP error with this status code. */
function isApiStatus(e: unknown, code: number): boolean {
  if (typeof e !== "object" || e === null) return false;
  const { code: c, statusCode } = e as { code?: unknown; statusCode?: unknown };
  return c === code || statusCode === code;
}

/** `pod/exec` status frame → exit code (V1Status: Success, or NonZeroExitCode with an ExitCode cause). */
export function exitCodeOf(status: V1Status | undefined): number | null {
  if (!status) return null;
  if (status.status === "Success") return 0;
  const cause = status.details?.causes?.find((c) => c.reason === "ExitCode");
  const code = Number(cause?.message);
  return cause && Number.isInteger(code) ? code : null;
}

/** A pod the runner can exec into: Running, Ready, not being deleted. */
export function isPodReady(pod: V1Pod): boolean {
  return (
    !pod.metadata?.deletionTimestamp &&
    pod.status?.phase === "Running" &&
    (pod.status.conditions ?? []).some((c) => c.type === "Ready" && c.status === "True")
  );
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

export class KubernetesDriver implements EngineDriver {
  readonly engine = "kubernetes" as const;
  readonly namespace: string;
  readonly #kc: KubeConfig;
  readonly #core: CoreV1Api;
  readonly #apps: AppsV1Api;
  readonly #networking: NetworkingV1Api;
  readonly #stacks: StackManager;
  readonly #runnerCidr: string | undefined;
  readonly #podLabels: Record<string, string> | undefined;
  readonly #namespaceLabels: Record<string, string> | undefined;
  readonly #readyTimeoutMs: number;
  readonly #placements = new Map<string, Placement>();
  /**
   * The Service's ClusterIP:port by workload, from the last `up`: the Service outlives scale-down,
   * so its address holds until the stack is destroyed. Reading the stack's outputs instead runs
   * the Pulumi CLI, about a second, on every relayed request.
   */
  readonly #endpoints = new Map<string, string>();
  /** Workloads the runner itself is replacing, scaling down or removing: their pods' ends are no news. */
  readonly #quiet = new Set<string>();
  /**
   * When an agent last ended by an OOM kill that left its container running, by workload. The
   * kernel's OOM killer may take the agent (an exec'd process) alone: the kubelet reports nothing
   * then (no container terminated), but the container cgroup's oom_kill count went up.
   */
  readonly #ooms = new Map<string, number>();

  constructor(kc: KubeConfig, stacks: StackManager, options: KubernetesDriverOptions = {}) {
    this.#kc = kc;
    this.#core = kc.makeApiClient(CoreV1Api);
    this.#apps = kc.makeApiClient(AppsV1Api);
    this.#networking = kc.makeApiClient(NetworkingV1Api);
    this.#stacks = stacks;
    this.namespace = options.namespace ?? "agent-sessions";
    this.#runnerCidr = options.runnerCidr;
    this.#podLabels = options.podLabels;
    this.#namespaceLabels = options.namespaceLabels;
    this.#readyTimeoutMs = options.readyTimeoutMs ?? 120_000;
  }

  async provision(
    containerName: string,
    spec: SessionSpec,
    secrets: { credentials: Record<string, string>; adapterToken: string },
  ): Promise<ProvisionResult> {
    if (workloadName(spec.namespace, spec.name) !== containerName) {
      throw new CodedError(
        "INVALID_ARGUMENT",
        `container_name ${containerName} does not match the session spec`,
      );
    }
    if (spec.engine !== "kubernetes") {
      throw new CodedError("INVALID_ARGUMENT", `spec engine ${spec.engine} on a kubernetes runner`);
    }
    // Never a session that silently lacks the checkout it asked for (issue 18: Docker only so far).
    if (spec.repo)
      throw new CodedError(
        "UNIMPLEMENTED",
        "seeding a workspace from a repository is not built on Kubernetes yet (Docker runners do it)",
        { reason: "RepoCloneFailed" },
      );
    if (spec.kubernetes.namespace !== this.namespace) {
      // The watch (and the runner's RBAC) cover one namespace; a session elsewhere would go unwatched.
      throw new CodedError(
        "INVALID_ARGUMENT",
        `this runner keeps sessions in namespace ${this.namespace}, not ${spec.kubernetes.namespace}`,
      );
    }
    this.#placements.set(containerName, { namespace: spec.namespace, name: spec.name });
    await this.#ensureNamespace();
    // The runner on the node reaches pods from the node (kube-proxy, the bridge), not from a pod
    // the runner selector matches, so the NetworkPolicy also admits runnerCidr. NetworkPolicy
    // needs a policy-capable network plugin to be enforced: the test bed has none (pods sit on
    // the docker bridge), so there the objects are declared and checked, not enforced.
    // The runner knows where its own connections come from: its pod labels and its namespace's
    // labels (a runner in the control plane's namespace) take the place of the spec's.
    const runnerCidr = spec.kubernetes.runnerCidr ?? this.#runnerCidr;
    const kubernetes = {
      ...spec.kubernetes,
      ...(this.#podLabels ? { runnerSelector: this.#podLabels } : {}),
      ...(this.#namespaceLabels ? { runnerNamespaceSelector: this.#namespaceLabels } : {}),
      ...(runnerCidr ? { runnerCidr } : {}),
    };
    // A changed spec recreates the pod (strategy Recreate): that deletion is ours.
    this.#quiet.add(containerName);
    try {
      this.#endpoints.delete(containerName);
      await this.#forgetLostObjects(containerName, spec);
      const outputs = await this.#stacks.up({ ...spec, kubernetes, replicas: 1 }, secrets);
      if (outputs.endpoint) this.#endpoints.set(containerName, outputs.endpoint);
      await this.#waitReady(containerName);
      return { containerName, endpoint: outputs.endpoint, resolvedImageDigest: outputs.resolvedImageDigest };
    } finally {
      this.#quiet.delete(containerName);
    }
  }

  /**
   * A re-provision recreates session objects deleted outside (the Deployment, most often): `up`
   * alone trusts the stack's state and would change nothing, leaving no pod. When one is missing,
   * `refresh` first drops what is gone from the state, so `up` creates it again under its name
   * (the PVC, when it is still there, keeps the workspace). A session with a Ready pod, and a
   * first provision, skip this.
   */
  async #forgetLostObjects(containerName: string, spec: SessionSpec): Promise<void> {
    if (await this.#readyPod(containerName).catch(() => undefined)) return;
    if (!(await this.#stacks.exists(spec.namespace, spec.name))) return;
    const namespace = this.namespace;
    const reads: (() => Promise<unknown>)[] = [
      () => this.#apps.readNamespacedDeployment({ name: containerName, namespace }),
      () => this.#core.readNamespacedService({ name: containerName, namespace }),
      () => this.#networking.readNamespacedNetworkPolicy({ name: containerName, namespace }),
      () => this.#core.readNamespacedSecret({ name: `${containerName}-credentials`, namespace }),
      () => this.#core.readNamespacedPersistentVolumeClaim({ name: `${containerName}-workspace`, namespace }),
    ];
    let lost = false;
    for (const read of reads) {
      // An object being deleted (a foreground deletion waits for its pods) still reads fine, and a
      // refresh now would keep it: wait until it is gone, then it counts as lost.
      const deadline = Date.now() + this.#readyTimeoutMs;
      for (;;) {
        let deleting = false;
        try {
          const object = (await read()) as { metadata?: { deletionTimestamp?: unknown } };
          deleting = Boolean(object.metadata?.deletionTimestamp);
        } catch (e) {
          if (!isApiStatus(e, 404)) throw e;
          lost = true;
        }
        if (!deleting) break;
        if (Date.now() > deadline)
          throw new CodedError("DEADLINE_EXCEEDED", `an object of ${containerName} is still being deleted`);
        await new Promise((r) => setTimeout(r, 250));
      }
    }
    if (lost) await this.#stacks.refresh(spec.namespace, spec.name);
  }

  async #ensureNamespace(): Promise<void> {
    try {
      await this.#core.readNamespace({ name: this.namespace });
      return;
    } catch (e) {
      // 403: a least-privilege runner may not read namespaces; the platform created this one.
      if (isApiStatus(e, 403)) return;
      if (!isApiStatus(e, 404)) throw e;
    }
    try {
      await this.#core.createNamespace({
        body: {
          metadata: { name: this.namespace, labels: { [Labels.managedBy]: "agent-sessions" } },
        },
      });
    } catch (e) {
      if (!isApiStatus(e, 409)) throw e; // created concurrently: fine
    }
  }

  async #waitReady(containerName: string): Promise<void> {
    const deadline = Date.now() + this.#readyTimeoutMs;
    while (!(await this.#readyPod(containerName))) {
      if (Date.now() > deadline)
        throw new CodedError("DEADLINE_EXCEEDED", `workspace ${containerName} has no Ready pod`);
      await new Promise((r) => setTimeout(r, 250));
    }
  }

  async #placement(containerName: string): Promise<Placement | undefined> {
    const known = this.#placements.get(containerName);
    if (known) return known;
    // After a runner restart: find the session by the labels on its PVC (kept while scaled to 0).
    const pvcs = await this.#core.listNamespacedPersistentVolumeClaim({
      namespace: this.namespace,
      labelSelector: `${Labels.managedBy}=agent-sessions`,
    });
    for (const pvc of pvcs.items) {
      const ns = pvc.metadata?.labels?.[Labels.namespace];
      const name = pvc.metadata?.labels?.[Labels.session];
      if (ns && name && workloadName(ns, name) === containerName) {
        const p = { namespace: ns, name };
        this.#placements.set(containerName, p);
        return p;
      }
    }
    return undefined;
  }

  /** The session's Ready pod, if any (selector of infra/kubernetes-session.ts). */
  async #readyPod(containerName: string): Promise<V1Pod | undefined> {
    const p = await this.#placement(containerName);
    if (!p) return undefined;
    const pods = await this.#core.listNamespacedPod({
      namespace: this.namespace,
      labelSelector: [
        `${Labels.session}=${p.name}`,
        `${Labels.namespace}=${p.namespace}`,
        `${Labels.component}=session`,
      ].join(","),
    });
    return pods.items.find(isPodReady);
  }

  oomSince(containerName: string, sinceMs: number): boolean {
    return (this.#ooms.get(containerName) ?? Number.NEGATIVE_INFINITY) >= sinceMs;
  }

  /**
   * Whether an agent that ended by SIGKILL was killed by the OOM killer. Two ways it shows: the
   * container died of it (its status says terminated or restarted, reason OOMKilled: the kernel
   * took the main process), or the container lives on and its cgroup counted one more OOM kill
   * (the kernel took the agent alone; the kubelet reports nothing then). Pod status lags the
   * kernel by a PLEG relist (~1 s), so this looks for up to OOM_SETTLE_MS; only a positive sign
   * counts, and without one the answer is no.
   */
  async #killedByOom(
    podName: string,
    container: string,
    baseline: Promise<number | undefined>,
    restarts: number,
  ): Promise<boolean> {
    const before = await baseline;
    const deadline = Date.now() + OOM_SETTLE_MS;
    for (;;) {
      const pod = await this.#core
        .readNamespacedPod({ name: podName, namespace: this.namespace })
        .catch(() => undefined);
      const status = pod?.status?.containerStatuses?.find((c) => c.name === container);
      const ended =
        status?.state?.terminated ??
        (status && status.restartCount > restarts ? status.lastState?.terminated : undefined);
      if (ended) return ended.reason === "OOMKilled";
      if (!pod || pod.metadata?.deletionTimestamp) return false; // the pod went: the watch says why
      const after = await this.#oomKills(podName, container);
      if (before !== undefined && after !== undefined && after > before) return true;
      if (Date.now() > deadline) return false;
      await new Promise((r) => setTimeout(r, 250));
    }
  }

  /** The OOM kills the pod container's cgroup counted so far; undefined when it cannot be read. */
  async #oomKills(podName: string, container: string): Promise<number | undefined> {
    try {
      const { exitCode, stdout } = await this.#capture(podName, container, OOM_KILLS);
      return exitCode === 0 ? oomKillsOf(stdout) : undefined;
    } catch {
      return undefined;
    }
  }

  async isRunning(containerName: string): Promise<boolean> {
    try {
      return (await this.#readyPod(containerName)) !== undefined;
    } catch {
      return false;
    }
  }

  async endpoint(containerName: string): Promise<string> {
    const p = await this.#placement(containerName);
    if (!p) throw new CodedError("NOT_FOUND", `workspace ${containerName} not found`);
    // ClusterIP:8080: the host reaches it through kube-proxy, an in-cluster runner directly.
    const cached = this.#endpoints.get(containerName);
    if (cached) return cached;
    const { endpoint } = await this.#stacks.outputs(p.namespace, p.name);
    if (endpoint) this.#endpoints.set(containerName, endpoint);
    return endpoint;
  }

  async adapterToken(containerName: string): Promise<string | undefined> {
    const p = await this.#placement(containerName);
    if (!p) return undefined;
    return this.#stacks.adapterToken(p.namespace, p.name).catch((e: unknown) => {
      if ((e as { code?: string }).code === "NOT_FOUND") return undefined;
      throw e;
    });
  }

  async startAgent(containerName: string, command: string[], output: AgentOutput): Promise<AgentProcess> {
    const pod = await this.#readyPod(containerName);
    const podName = pod?.metadata?.name;
    const container = pod?.spec?.containers[0]?.name;
    if (!pod || !podName || !container)
      throw new CodedError("NOT_FOUND", `workspace ${containerName} has no Ready pod`);

    const stdin = new PassThrough();
    const stdout = new PassThrough();
    const stderr = new PassThrough();
    stderr.setEncoding("utf8");
    stdout.pipe(output);
    // The wrapper's first stderr line is the agent's PID (for stop); the rest is the agent's own log.
    let pidResolve!: (pid: string | undefined) => void;
    const pid = new Promise<string | undefined>((r) => {
      pidResolve = r;
    });
    let errText = "";
    let pidSeen = false;
    stderr.on("data", (chunk: string) => {
      if (pidSeen) return;
      errText += chunk;
      const m = errText.match(new RegExp(`${PID_MARKER}(\\d+)\\n`));
      if (m) pidResolve(m[1]);
      if (m || errText.length > 4096) {
        pidSeen = true;
        errText = "";
      }
    });
    let status: V1Status | undefined;
    // `exec "$@"` keeps the PID: the process the runner signals is the agent itself.
    const wrapped = ["/bin/sh", "-c", `echo "${PID_MARKER}$$" >&2; exec "$@"`, "agent", ...command];
    let ws: Awaited<ReturnType<Exec["exec"]>>;
    try {
      ws = await new Exec(this.#kc).exec(
        this.namespace,
        podName,
        container,
        wrapped,
        stdout,
        stderr,
        stdin,
        false,
        (s) => {
          status = s;
        },
      );
    } catch (error) {
      if (!(await this.isRunning(containerName)))
        throw new CodedError("NOT_FOUND", `workspace ${containerName} has no Ready pod`);
      throw new CodedError("UNAVAILABLE", `exec into ${podName} failed: ${String(error)}`);
    }
    // The exec's handler writes stdout without looking at write()'s answer: the exec WebSocket is
    // paused while stdout is full, so a slow `output` backs up through the kubelet to the agent.
    ws.on("message", () => {
      if (stdout.writableNeedDrain) ws.pause();
    });
    stdout.on("drain", () => ws.resume());
    // The cgroup's OOM kills before this agent: one more when it ends killed means the OOM killer.
    const oomBaseline = this.#oomKills(podName, container);
    const restarts = pod.status?.containerStatuses?.find((c) => c.name === container)?.restartCount ?? 0;
    const exited = new Promise<{ exitCode: number | null }>((resolve) => {
      let closed = false;
      let drained = false;
      let finished = false;
      const finish = () => {
        if (!closed || !drained || finished) return;
        finished = true;
        pidResolve(undefined);
        const exitCode = exitCodeOf(status);
        // The last lines reach `output` before the exit is reported (bounded: it may be throttled).
        const settled = outputSettled(output, OUTPUT_SETTLE_MS);
        if (exitCode !== 137 && exitCode !== null) {
          void settled.then(() => resolve({ exitCode }));
          return;
        }
        // SIGKILL: from the OOM killer, or from someone's kill -9. No exit code at all: the exec
        // stream ended without its status frame, which is how the kubelet sometimes reports an
        // exec'd process the OOM killer took (seen in CI). Either way the cgroup and the pod
        // status tell; settled before the exit is reported, so oomSince answers when asked.
        void Promise.all([this.#killedByOom(podName, container, oomBaseline, restarts), settled]).then(
          ([oom]) => {
            if (oom) this.#ooms.set(containerName, Date.now());
            resolve({ exitCode });
          },
        );
      };
      stdout.once("end", () => {
        drained = true;
        finish();
      });
      ws.on("close", () => {
        closed = true;
        // Without a status frame (pod deleted, connection cut) nobody ended stdout.
        if (!stdout.writableEnded) stdout.end();
        finish();
      });
    });
    const ended = (ms: number) =>
      Promise.race([
        exited.then(() => true),
        new Promise<boolean>((r) => setTimeout(() => r(false), ms).unref()),
      ]);
    return {
      send: (line) => ws.readyState === ws.OPEN && stdin.write(`${line}\n`),
      stop: async () => {
        const agentPid = await Promise.race([pid, ended(2000).then(() => undefined)]);
        if (agentPid) {
          for (const signal of ["TERM", "KILL"]) {
            await this.#run(podName, container, ["kill", `-${signal}`, agentPid]).catch(() => undefined);
            if (await ended(STOP_GRACE_MS)) break;
          }
        }
        // No PID (the wrapper never spoke) or unkillable: close the socket so `exited` resolves;
        // the kubelet tears the stream down, what the process does then is up to it.
        if (ws.readyState !== ws.CLOSED) ws.close();
        await exited;
      },
      exited,
    };
  }

  /** A short command in the pod; its exit code and stdout once its status frame arrives. */
  async #capture(
    podName: string,
    container: string,
    command: string[],
  ): Promise<{ exitCode: number | null; stdout: string }> {
    let status: V1Status | undefined;
    let stdout = "";
    const out = new PassThrough();
    out.setEncoding("utf8");
    out.on("data", (chunk: string) => {
      if (stdout.length < 65_536) stdout += chunk;
    });
    const ws = await new Exec(this.#kc).exec(
      this.namespace,
      podName,
      container,
      command,
      out,
      new PassThrough().resume(),
      null,
      false,
      (s) => {
        status = s;
      },
    );
    await new Promise<void>((r) => ws.once("close", () => r()));
    return { exitCode: exitCodeOf(status), stdout };
  }

  /** A short command in the pod; resolves with its exit code once its status frame arrives. */
  async #run(podName: string, container: string, command: string[]): Promise<number | null> {
    let status: V1Status | undefined;
    const sink = () => new PassThrough().resume();
    const ws = await new Exec(this.#kc).exec(
      this.namespace,
      podName,
      container,
      command,
      sink(),
      sink(),
      null,
      false,
      (s) => {
        status = s;
      },
    );
    await new Promise<void>((r) => ws.once("close", () => r()));
    return exitCodeOf(status);
  }

  async scaleDown(containerName: string): Promise<void> {
    const p = await this.#placement(containerName);
    if (!p) throw new CodedError("NOT_FOUND", `workspace ${containerName} not found`);
    // Quiet until the next provision: the pod may finish terminating after `up` returns.
    this.#quiet.add(containerName);
    await this.#stacks.scaleDown(p.namespace, p.name);
  }

  async remove(containerName: string): Promise<void> {
    const p = await this.#placement(containerName);
    if (!p) return; // nothing of ours: removal is idempotent
    this.#quiet.add(containerName);
    await this.#stacks.destroy(p.namespace, p.name).catch((e: unknown) => {
      if ((e as { code?: string }).code !== "NOT_FOUND") throw e;
    });
    this.#placements.delete(containerName);
    this.#endpoints.delete(containerName);
  }

  async watch(onExit: OnExit): Promise<() => void> {
    const exits = new PodExits((name) => this.#quiet.has(name), onExit);
    const labelSelector = `${Labels.managedBy}=agent-sessions`;
    const path = `/api/v1/namespaces/${this.namespace}/pods`;
    let stopped = false;
    let controller: AbortController | undefined;
    let resourceVersion: string | undefined;
    let retry: NodeJS.Timeout | undefined;

    // A list gives the state and the resourceVersion to watch from; after a cut it also
    // catches up on what happened unwatched (pods keep running while the API server is away,
    // so unlike Docker's event stream a cut watch is no engine restart).
    const relist = async (first: boolean) => {
      const list = await this.#core.listNamespacedPod({ namespace: this.namespace, labelSelector });
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
      controller = await new Watch(this.#kc).watch(
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
    await subscribe(true);
    return () => {
      stopped = true;
      if (retry) clearTimeout(retry);
      controller?.abort();
    };
  }
}
