/**
 * The Kubernetes driver: provisioning through the session stack (stacks/, the Kubernetes session
 * program), the agent over a long-lived exec stream (the pods/exec WebSocket), and exits observed
 * through a watch on the session pods.
 *
 * "Running" here means what the runner can use: the Deployment's pod exists, is not being deleted,
 * is in phase Running and passes its readiness probe (condition Ready). A Deployment asking for one
 * replica whose pod is still starting is not running yet.
 *
 * The agent's exec is runner/kubernetes/exec.ts's; the pod watch and its exit reports are
 * runner/kubernetes/pod-watch.ts's.
 *
 * Stop and resume take a fast path (AGENT_SESSIONS_FAST_PATH=off turns it off), as on Docker
 * (runner/engine/fast-path.ts): stop scales the Deployment to 0 through the API and answers once its pod
 * is being deleted; resume, when the stack last recorded exactly the inputs asked for (same spec,
 * credentials and token) at scale 0 and every object of the session is still there, scales it to
 * 1 and answers once the pod is Ready (runner/kubernetes/scale.ts). Either way the same `up` the full
 * path runs then records the change in the background; the session's next operation does not wait
 * for it (recordings coalesce to the latest state, runner/engine/fast-path.ts). Once the latest
 * state is recorded the runner's claim on the fields it wrote is released
 * (runner/kubernetes/fast-create.ts); until then it makes an overtaken recording's apply of another
 * `spec.replicas` a conflict, so that recording cannot scale the Deployment back.
 *
 * A heal (the pod deleted, its container dead, while the stack records replicas 1 with the same
 * inputs and every object is there) runs no `up` at all: the Deployment already makes the new pod;
 * provision waits for it to be Ready and served by the Service. A first create takes the fast path
 * too unless `fastCreate` is off (runner/kubernetes/fast-create.ts: judged by the pack in process, applied
 * at once, recorded behind). Anything else — a changed spec or credentials, an object gone, a
 * runner that restarted since, a failed recording — takes the full path through `pulumi up`.
 */
import type { SessionMetrics } from "../../contracts/session-metrics.ts";
import { podMetrics } from "./metrics.ts";
import { podWorkloadLogs } from "./logs.ts";
import type { LogLine } from "../../contracts/session-logs.ts";
import {
  AppsV1Api,
  CoreV1Api,
  type KubeConfig,
  NetworkingV1Api,
  PatchStrategy,
  setHeaderOptions,
  type V1Pod,
} from "@kubernetes/client-node";
import { ADAPTER_PORT } from "../../contracts/adapter.ts";
import { AwakeDeadline } from "../../contracts/awake-deadline.ts";
import { CodedError, parseOrThrow } from "../../contracts/errors.ts";
import {
  Labels,
  SESSIONS_NAMESPACE_POD_SECURITY,
  SessionSpec,
  workloadName,
} from "../../contracts/session-spec.ts";
import { PolicyViolationError, type StackManager } from "../../stacks/index.ts";
import { ADAPTER_CONTAINER } from "../../contracts/session-pod.ts";
import { PodExec } from "./exec.ts";
import { KubernetesWorkspaceFiles } from "./workspace-files.ts";
import { KubernetesSnapshots } from "./snapshots.ts";
import { noGitImage } from "../engine/repo-scripts.ts";
import { isApiStatus, type OnExit, watchPodExits } from "./pod-watch.ts";
import { intactSessionService, scaleDeployment, serviceRoutesTo } from "./scale.ts";
import { fastCreateKubernetes, fastCreateManifests, releaseRunnerFields } from "./fast-create.ts";
import { harnessPort, readyPath, sessionResources } from "../../infra/kubernetes/manifests.ts";
import { PodFailures } from "./pod-failure.ts";
import { probeAdapter } from "../engine/adapter-probe.ts";
import {
  type DriverLog,
  FastPathRecords,
  type RecordContext,
  recordKey,
  type Secrets,
} from "../engine/fast-path.ts";
import type {
  AgentOutput,
  AgentProcess,
  EngineDriver,
  ProvisionResult,
  ProvisionSecrets,
} from "../engine/driver.ts";

type Placement = { namespace: string; name: string };

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
  /**
   * The runner's git image (AGENT_SESSIONS_GIT_IMAGE, digest-pinned): each session pod gets a
   * `workspace` sidecar of it, through which the files API, repo seed and diff run
   * (runner/kubernetes/workspace-files.ts, repo-seed.ts). Unset: no sidecar, and those answer UNIMPLEMENTED.
   */
  workspaceImage?: string | undefined;
  /** Stop, resume and heal act on the cluster at once and record the stack afterwards. @default true */
  fastPath?: boolean;
  /** A first create takes the fast path too (runner/kubernetes/fast-create.ts). @default true */
  fastCreate?: boolean;
  /** How a fast create or heal asks the adapter whether it serves (tests replace it). @default probeAdapter */
  probeAdapter?: (endpoint: string, timeoutMs: number, path?: string) => Promise<void>;
  log?: DriverLog;
};

/** How often a fast stop or resume looks at the session's pods. */
const FAST_POLL_MS = 100;
/** How long a fast stop waits for the pod's deletion to start before it answers anyway. */
const STOP_SETTLE_MS = 10_000;
/** How long a fast resume waits for its Service to list the Ready pod before it answers anyway. */
const ROUTE_SETTLE_MS = 10_000;
/**
 * How long a fast create or heal waits for the adapter to answer through the ClusterIP (kube-proxy
 * programs it after the endpoints list the pod) before it answers anyway.
 */
const SERVE_SETTLE_MS = 15_000;

/** A pod the runner can exec into: Running, Ready, not being deleted. */
export function isPodReady(pod: V1Pod): boolean {
  return (
    !pod.metadata?.deletionTimestamp &&
    pod.status?.phase === "Running" &&
    (pod.status.conditions ?? []).some((c) => c.type === "Ready" && c.status === "True")
  );
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
  readonly #exec: PodExec;
  readonly #workspaceImage: string | undefined;
  readonly workspace: KubernetesWorkspaceFiles | undefined;
  /** Snapshots (runner/kubernetes/snapshots.ts); with a git image only (their copy pods run it). */
  readonly snapshots: KubernetesSnapshots | undefined;
  readonly #fastPath: boolean;
  readonly #createsFast: boolean;
  readonly #probeAdapter: (endpoint: string, timeoutMs: number, path?: string) => Promise<void>;
  readonly #log: DriverLog;
  /** What each workspace's stack records, and the background `up`s recording fast-path changes. */
  readonly #records: FastPathRecords;

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
    this.#exec = new PodExec(kc, this.#core, this.namespace);
    this.#workspaceImage = options.workspaceImage;
    this.workspace = options.workspaceImage
      ? new KubernetesWorkspaceFiles(this.#exec, {
          readyPod: async (containerName) => {
            const pod = await this.#readyPod(containerName);
            const name = pod?.metadata?.name;
            return pod && name
              ? { name, containers: (pod.spec?.containers ?? []).map((c) => c.name) }
              : undefined;
          },
        })
      : undefined;
    this.snapshots = options.workspaceImage
      ? new KubernetesSnapshots({
          core: this.#core,
          apps: this.#apps,
          networking: this.#networking,
          exec: this.#exec,
          stacks,
          namespace: this.namespace,
          image: options.workspaceImage,
          ensureNamespace: () => this.#ensureNamespace(),
          sessionPods: (containerName) => this.#sessionPods(containerName),
          ...(options.log ? { log: options.log } : {}),
        })
      : undefined;
    this.#fastPath = options.fastPath ?? true;
    this.#createsFast = this.#fastPath && (options.fastCreate ?? true);
    this.#probeAdapter = options.probeAdapter ?? probeAdapter;
    this.#log = options.log ?? (() => undefined);
    this.#records = new FastPathRecords(this.#log);
  }

  /** Resolves when the workspace's last fast-path change is recorded in its stack (at once if none). */
  settled(containerName: string): Promise<void> {
    return this.#records.settled(containerName);
  }

  async provision(
    containerName: string,
    spec: SessionSpec,
    secrets: ProvisionSecrets,
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
    // Never a session that silently lacks the checkout it asked for.
    if (spec.repo && !this.#workspaceImage) throw noGitImage("seed a workspace from a repository");
    if (spec.seedSnapshot && !this.snapshots) throw noGitImage("copy a snapshot into a fork's volume");
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
      // The sessions namespace is the runner's setting (AGENT_SESSIONS_KUBERNETES_NAMESPACE): its
      // watch and RBAC cover that one. The server does not choose it (its spec carries the schema's
      // default), so the runner's own takes its place (issue 34 item 10).
      namespace: this.namespace,
      ...(this.#podLabels ? { runnerSelector: this.#podLabels } : {}),
      ...(this.#namespaceLabels ? { runnerNamespaceSelector: this.#namespaceLabels } : {}),
      ...(runnerCidr ? { runnerCidr } : {}),
      ...(this.#workspaceImage ? { workspaceImage: this.#workspaceImage } : {}),
    };
    // Parsed: the fast create builds the objects from it, defaults filled as the program's would be.
    const scaled = parseOrThrow(SessionSpec, { ...spec, kubernetes, replicas: 1 as const }, "session spec");
    const key = recordKey(scaled, secrets);
    const seededSnapshot = await this.#seed(containerName, scaled, secrets);
    const seeded = seededSnapshot ? { seededSnapshot } : {};
    // A heal changes nothing the stack declares: it need not wait for a recording in flight.
    // Never waits for the recording of an earlier operation (runner/engine/fast-path.ts).
    const healed = await this.#fastHeal(containerName, scaled, key);
    const fast =
      healed ??
      (await this.#fastResume(containerName, scaled, secrets, key)) ??
      (await this.#fastCreate(containerName, scaled, secrets, key));
    if (fast) {
      // Seeded once: on a resume the checkout is there and nothing is fetched.
      const seededCommit = await this.workspace?.seed(containerName, spec, secrets.repoCredentials ?? {});
      return { ...fast, ...seeded, ...(seededCommit ? { seededCommit } : {}) };
    }
    // A changed spec recreates the pod (strategy Recreate): that deletion is ours.
    this.#quiet.add(containerName);
    try {
      this.#endpoints.delete(containerName);
      this.#records.forget(containerName);
      // A recording still running ends first; then no claim of the runner's fast path (of a
      // replicas this `up` may set otherwise) stands in the way of the provider's apply.
      await this.#records.settled(containerName);
      await this.#release(scaled);
      await this.#forgetLostObjects(containerName, spec);
      const outputs = await this.#stacks.up(scaled, secrets);
      this.#records.set(containerName, { key, replicas: 1 });
      // The `up` does not await the rollout (skipAwait, infra/kubernetes/manifests.ts): the pod
      // Ready and the adapter served through its ClusterIP are waited for here.
      await this.#waitReady(containerName);
      const endpoint = outputs.endpoint && (await this.#waitServing(containerName, outputs.endpoint, spec));
      if (endpoint) this.#endpoints.set(containerName, endpoint);
      // Once, before any agent session starts in it: a seeded checkout is never fetched again.
      const seededCommit = await this.workspace?.seed(containerName, spec, secrets.repoCredentials ?? {});
      return {
        containerName,
        endpoint: endpoint || outputs.endpoint,
        resolvedImageDigest: outputs.resolvedImageDigest,
        ...seeded,
        ...(seededCommit ? { seededCommit } : {}),
      };
    } finally {
      this.#quiet.delete(containerName);
    }
  }

  /**
   * Resume on the cluster at once, when the stack last recorded exactly these inputs at scale 0
   * and every object of the session is still there: the Deployment to 1, its pod Ready, then the
   * same `up` at scale 1 records it in the background. Undefined: take the full path.
   */
  async #fastResume(
    containerName: string,
    spec: SessionSpec,
    secrets: Secrets,
    key: string,
  ): Promise<ProvisionResult | undefined> {
    const last = this.#records.get(containerName);
    if (!this.#fastPath || last?.key !== key || last.replicas !== 0) return undefined;
    const apis = { core: this.#core, apps: this.#apps, networking: this.#networking };
    const service = await intactSessionService(apis, this.namespace, containerName).catch(() => undefined);
    const clusterIP = service?.spec?.clusterIP;
    if (!clusterIP) return undefined;
    const done = this.#stacks.markRecording(spec.namespace, spec.name);
    try {
      await scaleDeployment(this.#apps, this.namespace, containerName, 1);
    } catch (error) {
      done();
      this.#log("warn", "fast resume failed; taking the full path", {
        container: containerName,
        error: (error as Error).message.slice(0, 500),
      });
      return undefined;
    }
    let endpoint: string;
    try {
      await this.#waitReady(containerName, FAST_POLL_MS);
      endpoint = await this.#waitServing(containerName, `${clusterIP}:${ADAPTER_PORT}`, spec);
    } catch (error) {
      // The Deployment asks for 1 and the stack says 0: unknown now, the next operation reconciles.
      done();
      this.#records.forget(containerName);
      throw error;
    } finally {
      this.#quiet.delete(containerName);
    }
    this.#endpoints.set(containerName, endpoint);
    this.#records.record(containerName, { key, replicas: 1 }, (r) => this.#record(spec, secrets, r), done);
    // As the session program's output says (infra/kubernetes/session.ts): the image is digest-pinned.
    return { containerName, endpoint, resolvedImageDigest: spec.image.split("@")[1] ?? "" };
  }

  /**
   * A fork's first provision: the session's PVC made and filled from `spec.seedSnapshot` before
   * any of its pods starts (the agent reads its conversation when it starts), after the pack has
   * judged the session as the fast create or `up` will (a refusal makes nothing). The storage's
   * name when it copied; undefined when there was nothing to seed (a resume).
   */
  async #seed(
    containerName: string,
    spec: SessionSpec,
    secrets: ProvisionSecrets,
  ): Promise<string | undefined> {
    if (!spec.seedSnapshot || !this.snapshots) return undefined;
    return this.snapshots.seed(containerName, spec, async () => {
      if (await this.#stacks.exists(spec.namespace, spec.name)) return true;
      const violations = await this.#stacks.judge(
        spec,
        sessionResources(spec, fastCreateManifests(spec, secrets)),
      );
      if (violations?.length)
        throw new PolicyViolationError(this.#stacks.stackName(spec.namespace, spec.name), violations);
      return false;
    });
  }

  /**
   * Heal: the stack records replicas 1 with exactly these inputs, every object is there and the
   * Deployment asks for 1, but no pod is Ready (deleted, its container died): the Deployment's
   * ReplicaSet (or the kubelet) is already bringing it back, and an `up` would change nothing.
   * Waits for the Ready pod and its Service, records nothing, and does not wait for a recording
   * in flight of the same inputs at replicas 1 (a resume's or create's). Undefined: not a heal.
   */
  async #fastHeal(
    containerName: string,
    spec: SessionSpec,
    key: string,
  ): Promise<ProvisionResult | undefined> {
    const last = this.#records.get(containerName);
    if (!this.#fastPath || last?.key !== key || last.replicas !== 1) return undefined;
    const apis = { core: this.#core, apps: this.#apps, networking: this.#networking };
    const [service, deployment] = await Promise.all([
      intactSessionService(apis, this.namespace, containerName),
      this.#apps.readNamespacedDeployment({ name: containerName, namespace: this.namespace }),
    ]).catch(() => [undefined, undefined] as const);
    const clusterIP = service?.spec?.clusterIP;
    if (!clusterIP || deployment?.spec?.replicas !== 1) return undefined;
    await this.#waitReady(containerName, FAST_POLL_MS);
    const endpoint = await this.#waitServing(containerName, `${clusterIP}:${ADAPTER_PORT}`, spec);
    this.#endpoints.set(containerName, endpoint);
    return { containerName, endpoint, resolvedImageDigest: spec.image.split("@")[1] ?? "" };
  }

  /**
   * A first create (no stack yet, nothing recorded here) on the cluster at once, judged by the
   * pack in process first (runner/kubernetes/fast-create.ts); answered once the pod is Ready and served
   * through its ClusterIP, then recorded by the stack's own `up`, which adopts the objects.
   */
  async #fastCreate(
    containerName: string,
    spec: SessionSpec,
    secrets: Secrets,
    key: string,
  ): Promise<ProvisionResult | undefined> {
    if (!this.#createsFast || this.#records.get(containerName)) return undefined;
    if (await this.#stacks.exists(spec.namespace, spec.name)) return undefined;
    const done = this.#stacks.markRecording(spec.namespace, spec.name);
    const apis = { core: this.#core, apps: this.#apps, networking: this.#networking };
    const log: DriverLog = (level, msg, fields) =>
      this.#log(level, msg, { container: containerName, ...fields });
    let made: true | undefined;
    try {
      made = await fastCreateKubernetes(apis, this.#stacks, spec, secrets, log);
    } catch (error) {
      done();
      // A refusal of the pack is final, as the `up`'s would be.
      if ((error as Error).name === "PolicyViolationError") throw error;
      log("warn", "fast create failed; taking the full path", {
        error: (error as Error).message.slice(0, 500),
      });
      return undefined;
    }
    if (!made) {
      done();
      return undefined;
    }
    let endpoint: string;
    try {
      const service = await this.#core.readNamespacedService({
        name: containerName,
        namespace: this.namespace,
      });
      await this.#waitReady(containerName, FAST_POLL_MS);
      endpoint = await this.#waitServing(containerName, `${service.spec?.clusterIP}:${ADAPTER_PORT}`, spec);
    } catch (error) {
      // Made but not Ready: the recording still declares what was made, so a remove finds it all.
      this.#records.record(containerName, { key, replicas: 1 }, (r) => this.#record(spec, secrets, r), done);
      throw error;
    }
    this.#endpoints.set(containerName, endpoint);
    this.#records.record(containerName, { key, replicas: 1 }, (r) => this.#record(spec, secrets, r), done);
    return { containerName, endpoint, resolvedImageDigest: spec.image.split("@")[1] ?? "" };
  }

  /**
   * The recording `up` of a fast-path change, then, when no newer state was declared meanwhile, the
   * runner's claim on the fields released. Until then the claim (on the latest `spec.replicas`)
   * makes the provider's apply of another value a conflict: a recording overtaken by a newer
   * operation cannot scale the Deployment back.
   */
  async #record(spec: SessionSpec, secrets: Secrets, recording: RecordContext): Promise<void> {
    await this.#stacks.up(spec, secrets, { recordOnly: true });
    if (recording.latest()) await this.#release(spec);
  }

  async #release(spec: Pick<SessionSpec, "namespace" | "name">): Promise<void> {
    const apis = { core: this.#core, apps: this.#apps, networking: this.#networking };
    // A claim left behind only risks a conflict later, which the full path then reports.
    await releaseRunnerFields(apis, this.namespace, spec).catch((error: unknown) =>
      this.#log("warn", "releasing the runner's field claims failed", {
        container: workloadName(spec.namespace, spec.name),
        error: (error as Error).message.slice(0, 500),
      }),
    );
  }

  /**
   * Waits (bounded) until the Service lists the Ready pod and the adapter answers /readyz through
   * the ClusterIP: kube-proxy programs the route only after the endpoints (1.20: EndpointSlices)
   * list the pod, and the runner reaches the adapter through it. Returns the address to reach the
   * adapter at: the ClusterIP's; the pod's own when the route does not serve by the deadline while
   * the pod answers directly (seen once in CI on 1.20: after a second pod deletion the ClusterIP
   * answered HTTP 404 for minutes while the new pod was Ready); the ClusterIP's again, with a
   * warning, when neither answers. An `openai-chat` harness (`spec.session`) is asked `/healthz`,
   * on its own port at the pod's address (the Service maps ADAPTER_PORT to it).
   */
  async #waitServing(
    containerName: string,
    endpoint: string,
    spec: Pick<SessionSpec, "session">,
  ): Promise<string> {
    await this.#waitRouted(containerName);
    const deadline = new AwakeDeadline(SERVE_SETTLE_MS);
    for (;;) {
      try {
        await this.#probeAdapter(endpoint, 1_000, readyPath(spec));
        return endpoint;
      } catch (error) {
        if (deadline.passed()) {
          const podIP = (await this.#readyPod(containerName).catch(() => undefined))?.status?.podIP;
          const direct = podIP ? `${podIP}:${harnessPort(spec)}` : undefined;
          const answer = direct
            ? await this.#probeAdapter(direct, 1_000, readyPath(spec)).then(
                () => undefined,
                (e: Error) => e.message.slice(0, 200),
              )
            : "no Ready pod";
          const fields = {
            container: containerName,
            error: (error as Error).message.slice(0, 500),
            pod_endpoint: direct,
          };
          if (direct && answer === undefined) {
            this.#log(
              "warn",
              "the adapter does not answer through its ClusterIP; using the pod's address",
              fields,
            );
            return direct;
          }
          this.#log("warn", "the adapter does not answer yet; answering anyway", { ...fields, pod: answer });
          return endpoint;
        }
      }
      await new Promise((r) => setTimeout(r, FAST_POLL_MS));
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
      const deadline = new AwakeDeadline(this.#readyTimeoutMs);
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
        if (deadline.passed())
          throw new CodedError("DEADLINE_EXCEEDED", `an object of ${containerName} is still being deleted`);
        await new Promise((r) => setTimeout(r, 250));
      }
    }
    if (lost) await this.#stacks.refresh(spec.namespace, spec.name);
  }

  async #ensureNamespace(): Promise<void> {
    try {
      const existing = await this.#core.readNamespace({ name: this.namespace });
      await this.#enforcePodSecurity(existing.metadata?.labels ?? {});
      return;
    } catch (e) {
      // 403: a least-privilege runner may not read namespaces; the platform created this one.
      if (isApiStatus(e, 403)) return;
      if (!isApiStatus(e, 404)) throw e;
    }
    try {
      await this.#core.createNamespace({
        body: {
          metadata: {
            name: this.namespace,
            labels: { [Labels.managedBy]: "agent-sessions", ...SESSIONS_NAMESPACE_POD_SECURITY },
          },
        },
      });
    } catch (e) {
      if (!isApiStatus(e, 409)) throw e; // created concurrently: fine
    }
  }

  /**
   * A namespace this driver created before it labelled its namespaces for Pod Security gets the
   * labels now, so admission refuses there what `restricted` forbids. One the platform made (not
   * ours) is the platform's to label; a runner not allowed to patch namespaces leaves it as it is.
   */
  async #enforcePodSecurity(labels: Record<string, string>): Promise<void> {
    if (labels[Labels.managedBy] !== "agent-sessions") return;
    if (Object.entries(SESSIONS_NAMESPACE_POD_SECURITY).every(([key, value]) => labels[key] === value))
      return;
    await this.#core
      .patchNamespace(
        { name: this.namespace, body: { metadata: { labels: SESSIONS_NAMESPACE_POD_SECURITY } } },
        setHeaderOptions("Content-Type", PatchStrategy.MergePatch),
      )
      .catch((e: unknown) => {
        if (!isApiStatus(e, 403)) throw e;
      });
  }

  /**
   * Waits for the session's Ready pod; fails at once when the kubelet reports one it will not make
   * Ready by itself (an image it cannot pull; a container that keeps exiting, or whose config it cannot
   * build, for longer than the kubelet's retries take: runner/kubernetes/pod-failure.ts).
   */
  async #waitReady(containerName: string, pollMs = 250): Promise<void> {
    const deadline = new AwakeDeadline(this.#readyTimeoutMs);
    const failures = new PodFailures();
    for (;;) {
      const pods = await this.#sessionPods(containerName);
      if (pods.some(isPodReady)) return;
      const failure = failures.check(pods);
      if (failure) throw failure;
      if (deadline.passed())
        throw new CodedError("DEADLINE_EXCEEDED", `workspace ${containerName} has no Ready pod`);
      await new Promise((r) => setTimeout(r, pollMs));
    }
  }

  /** Waits (bounded) until the Service routes to the Ready pod (its Endpoints list it). */
  async #waitRouted(containerName: string): Promise<void> {
    const deadline = new AwakeDeadline(ROUTE_SETTLE_MS);
    for (;;) {
      const pod = await this.#readyPod(containerName);
      if (pod && (await serviceRoutesTo(this.#core, this.namespace, containerName, pod))) return;
      if (deadline.passed()) {
        this.#log("warn", "the Service does not list the Ready pod yet; answering anyway", {
          container: containerName,
        });
        return;
      }
      await new Promise((r) => setTimeout(r, FAST_POLL_MS));
    }
  }

  /** Waits (bounded) until every pod of the session is being deleted or gone. */
  async #waitPodsGoing(containerName: string): Promise<void> {
    const deadline = new AwakeDeadline(STOP_SETTLE_MS);
    while ((await this.#sessionPods(containerName)).some((pod) => !pod.metadata?.deletionTimestamp)) {
      if (deadline.passed()) {
        this.#log("warn", "a fast stop's pod is not being deleted yet; answering anyway", {
          container: containerName,
        });
        return;
      }
      await new Promise((r) => setTimeout(r, FAST_POLL_MS));
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

  /** The session's Ready pod, if any. */
  async #readyPod(containerName: string): Promise<V1Pod | undefined> {
    return (await this.#sessionPods(containerName)).find(isPodReady);
  }

  /** The session's pods (selector of infra/kubernetes/session.ts). */
  async #sessionPods(containerName: string): Promise<V1Pod[]> {
    const p = await this.#placement(containerName);
    if (!p) return [];
    const pods = await this.#core.listNamespacedPod({
      namespace: this.namespace,
      labelSelector: [
        `${Labels.session}=${p.name}`,
        `${Labels.namespace}=${p.namespace}`,
        `${Labels.component}=session`,
      ].join(","),
    });
    return pods.items;
  }

  oomSince(containerName: string, sinceMs: number): boolean {
    return (this.#ooms.get(containerName) ?? Number.NEGATIVE_INFINITY) >= sinceMs;
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
    const { endpoint } = await this.#stacks.outputs(p.namespace, p.name).catch(async (e: unknown) => {
      // A fast create whose recording a restart cut short: the Service is there, the stack is not
      // (NOT_FOUND), or not its outputs yet (INVALID_ARGUMENT: the first `up` was killed midway).
      const code = (e as { code?: string }).code;
      if (code !== "NOT_FOUND" && code !== "INVALID_ARGUMENT") throw e;
      const service = await this.#core
        .readNamespacedService({ name: containerName, namespace: this.namespace })
        .catch(() => undefined);
      const ip = service?.spec?.clusterIP;
      if (!ip) throw e;
      return { endpoint: `${ip}:${ADAPTER_PORT}` };
    });
    if (endpoint) this.#endpoints.set(containerName, endpoint);
    return endpoint;
  }

  async adapterToken(containerName: string): Promise<string | undefined> {
    const p = await this.#placement(containerName);
    if (!p) return undefined;
    return this.#stacks.adapterToken(p.namespace, p.name).catch(async (e: unknown) => {
      if ((e as { code?: string }).code !== "NOT_FOUND") throw e;
      // A fast create whose recording a restart cut short: the token is in the session's Secret.
      const secret = await this.#core
        .readNamespacedSecret({ name: `${containerName}-credentials`, namespace: this.namespace })
        .catch(() => undefined);
      const token = secret?.data?.ADAPTER_TOKEN;
      return token ? Buffer.from(token, "base64").toString("utf8") : undefined;
    });
  }

  async workloadLogs(
    containerName: string,
    options: { tailLines: number; sinceTime?: string | undefined },
  ): Promise<LogLine[]> {
    // A Ready pod first; else any (a crashing adapter's pod is not Ready, and its log says why).
    const pods = await this.#sessionPods(containerName);
    return podWorkloadLogs(this.#core, this.namespace, pods.find(isPodReady) ?? pods[0], options);
  }

  async startAgent(
    containerName: string,
    command: string[],
    output: AgentOutput,
    stderr?: (chunk: string) => void,
  ): Promise<AgentProcess> {
    const pod = await this.#readyPod(containerName);
    const podName = pod?.metadata?.name;
    const container = pod?.spec?.containers.find((c) => c.name === ADAPTER_CONTAINER)?.name;
    if (!pod || !podName || !container)
      throw new CodedError("NOT_FOUND", `workspace ${containerName} has no Ready pod`);
    return this.#exec.startAgent({ containerName, pod, podName, container }, command, output, {
      isRunning: () => this.isRunning(containerName),
      onOom: () => this.#ooms.set(containerName, Date.now()),
      ...(stderr ? { onStderr: stderr } : {}),
    });
  }

  async scaleDown(containerName: string): Promise<void> {
    const p = await this.#placement(containerName);
    if (!p) throw new CodedError("NOT_FOUND", `workspace ${containerName} not found`);
    // Quiet until the next provision: the pod may finish terminating after `up` returns.
    this.#quiet.add(containerName);
    await this.#records.scaleDown(
      containerName,
      this.#fastPath ? () => this.#fastStop(containerName, p) : undefined,
      async (recording) => {
        if (recording) {
          await this.#stacks.scaleDown(p.namespace, p.name, { recordOnly: true });
          if (recording.latest()) await this.#release(p);
          return;
        }
        await this.#records.settled(containerName);
        await this.#release(p);
        await this.#stacks.scaleDown(p.namespace, p.name);
        // As a fast stop answers: once the pod is being deleted (the `up` does not await it).
        await this.#waitPodsGoing(containerName).catch(() => undefined);
      },
    );
  }

  /**
   * Stop on the cluster at once: the Deployment to 0 through the API, answered once its pod is
   * being deleted. Returns what clears the stack's recording mark; undefined: take the full path.
   */
  async #fastStop(containerName: string, p: Placement): Promise<(() => void) | undefined> {
    const done = this.#stacks.markRecording(p.namespace, p.name);
    try {
      await scaleDeployment(this.#apps, this.namespace, containerName, 0);
    } catch (error) {
      done();
      this.#log("warn", "fast stop failed; taking the full path", {
        container: containerName,
        error: (error as Error).message.slice(0, 500),
      });
      return undefined;
    }
    // The Deployment is at 0 whatever a failed look at its pods says: the stop stands.
    await this.#waitPodsGoing(containerName).catch((error: unknown) =>
      this.#log("warn", "a fast stop could not look at its pods", {
        container: containerName,
        error: (error as Error).message.slice(0, 500),
      }),
    );
    return done;
  }

  interruptedRecordings(): string[] {
    return this.#stacks.interruptedRecordings().map((p) => {
      const containerName = workloadName(p.namespace, p.name);
      this.#placements.set(containerName, p);
      return containerName;
    });
  }

  async recordEngineState(containerName: string): Promise<void> {
    const p = await this.#placement(containerName);
    if (!p) return;
    this.#records.forget(containerName);
    const deployment = await this.#apps
      .readNamespacedDeployment({ name: containerName, namespace: this.namespace })
      .catch((e: unknown) => {
        if (isApiStatus(e, 404)) return undefined;
        throw e;
      });
    const done = this.#stacks.markRecording(p.namespace, p.name);
    try {
      if (deployment?.spec?.replicas === 1)
        await this.#stacks.resume(p.namespace, p.name, { recordOnly: true });
      else await this.#stacks.scaleDown(p.namespace, p.name, { recordOnly: true });
      await this.#release(p);
    } finally {
      done();
    }
  }

  /**
   * Refused: Kubernetes has no freezer an unprivileged runner may use without breaking an
   * invariant. The cgroup freezer needs the node's cgroup filesystem writable (a privileged pod or
   * a hostPath mount, both refused by the policy pack and Pod Security `restricted`); SIGSTOP of
   * the pod's processes through exec would fail its liveness and readiness probes (the kubelet
   * restarts it, the memory is lost) and leaves the adapter unable to answer; the kubelet offers
   * no pause of its own. Sessions on Kubernetes stay in the running and stopped tiers.
   */
  async pause(containerName: string): Promise<void> {
    throw new CodedError("FAILED_PRECONDITION", pauseRefusal(containerName));
  }

  async unpause(): Promise<void> {
    // Nothing is ever paused here.
  }

  async memoryBytes(): Promise<number | undefined> {
    return undefined;
  }

  async metrics(containerName: string, signal?: AbortSignal): Promise<SessionMetrics> {
    return podMetrics(this.#exec, containerName, await this.#readyPod(containerName), signal);
  }

  async isPaused(): Promise<boolean> {
    return false;
  }

  async remove(containerName: string): Promise<void> {
    const p = await this.#placement(containerName);
    this.#quiet.add(containerName);
    // No PVC left to find its session (and stack) by: what else of it is left goes by its names,
    // as a restarted runner's remove must leave nothing running (issue 34 item 11).
    if (!p) return this.#deleteLeftovers(containerName);
    // A pending recording is dropped; one running finishes first.
    this.#records.forget(containerName);
    await this.#records.settled(containerName);
    await this.#stacks.destroy(p.namespace, p.name).catch((e: unknown) => {
      if ((e as { code?: string }).code !== "NOT_FOUND") throw e;
    });
    await this.#deleteLeftovers(containerName);
    this.#placements.delete(containerName);
    this.#endpoints.delete(containerName);
  }

  /**
   * "Removed" means removed (issue 34 item 11): the session's objects go even when its stack did
   * not hold them (the fast path made them at once, and a runner restart cut the recording short).
   * Gone already (the stack's destroy) is fine.
   */
  async #deleteLeftovers(containerName: string): Promise<void> {
    const namespace = this.namespace;
    const deletes: (() => Promise<unknown>)[] = [
      () => this.#apps.deleteNamespacedDeployment({ name: containerName, namespace }),
      () => this.#core.deleteNamespacedService({ name: containerName, namespace }),
      () => this.#networking.deleteNamespacedNetworkPolicy({ name: containerName, namespace }),
      () => this.#core.deleteNamespacedSecret({ name: `${containerName}-credentials`, namespace }),
      () =>
        this.#core.deleteNamespacedPersistentVolumeClaim({ name: `${containerName}-workspace`, namespace }),
      () => this.#core.deleteNamespacedConfigMap({ name: `${containerName}-skills`, namespace }),
    ];
    for (const remove of deletes)
      await remove().catch((e: unknown) => {
        if (!isApiStatus(e, 404)) throw e;
      });
  }

  watch(onExit: OnExit): Promise<() => void> {
    return watchPodExits(
      this.#kc,
      this.#core,
      this.namespace,
      (name) => this.#quiet.has(name),
      onExit,
      this.#log,
    );
  }
}

/** Why a Kubernetes runner refuses to pause (the server refuses `desiredState: paused` the same way before asking). */
export function pauseRefusal(containerName: string): string {
  return `workspace ${containerName} is on Kubernetes, which has no freezer an unprivileged runner can use: the cgroup freezer needs a privileged pod or a hostPath mount (refused by the policy pack and Pod Security restricted), and SIGSTOP through exec would fail the pod's probes; the paused tier is Docker only`;
}
