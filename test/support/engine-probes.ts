/**
 * What an end-to-end test checks on the engine itself, behind one small interface: the Docker
 * probe asks dockerd (inspect, list), the Kubernetes probe asks the test bed's API server and
 * execs with its kubectl. Scenarios written against it run on either engine unchanged.
 */
import { ADAPTER_CONTAINER } from "../../contracts/session-pod.ts";
import { execFile } from "node:child_process";
import { readdir, readFile, stat } from "node:fs/promises";
import { basename, dirname, join } from "node:path";
import { promisify } from "node:util";
import type { V1Pod } from "@kubernetes/client-node";
import type Docker from "dockerode";
import { ADAPTER_PORT } from "../../contracts/adapter.ts";
import { Labels } from "../../contracts/session-spec.ts";
import {
  CONTAINER_LOG_MAX_BYTES_PER_FILE,
  CONTAINER_LOG_MAX_FILES,
} from "../../infra/docker/provider/log-limits.ts";
import { isPodReady } from "../../runner/kubernetes/driver.ts";
import { isGone, type KubeClients, kubeClients } from "./kube-harness.ts";
import { dockerClient, dockerExec } from "./session-harness.ts";
import { until } from "./system.ts";
import { PodExits } from "./pod-exits.ts";
import { kubectlPath } from "./testbed.ts";

export type Engine = "docker" | "kubernetes";

/** A session workload of a namespace: `running` when it can run an agent now. */
export type WorkspaceInfo = { name: string; state: "running" | "stopped" | "starting"; session: string };

/**
 * How long a stopped or removed Kubernetes workload's pod may still be listed: the kubelet deletes
 * one in seconds (measured 6.2 s p50 stop, 3.2 s destroy), more on a loaded machine.
 */
export const KUBERNETES_STOPPED_WITHIN_MS = 60_000;

/**
 * After a delete: every engine object of `workload` gone (its kinds as `objects` names them). At
 * once on Docker; on Kubernetes the Deployment is deleted in the foreground and goes with its last
 * pod, which the kubelet may keep for a few seconds, so within the bound a stopped pod has
 * (`stoppedWithinMs`).
 * Past it, fails naming what is left. Resolves with the kinds it checked.
 */
export async function objectsGone(probe: EngineProbe, workload: string): Promise<string[]> {
  return until(
    `every engine object of ${workload} gone`,
    async () => {
      const objects = await probe.objects(workload);
      const left = Object.entries(objects).filter(([, exists]) => exists);
      if (left.length) throw new Error(`still there: ${left.map(([kind]) => kind).join(", ")}`);
      return Object.keys(objects);
    },
    probe.stoppedWithinMs,
  );
}

export interface EngineProbe {
  readonly engine: Engine;
  /** The workload runs: the container is Running / the Deployment has its one Ready pod. */
  running(workload: string): Promise<boolean>;
  /**
   * Stopped with the volume kept: no container / Deployment at replicas 0 and no pod; volume / PVC
   * there. Throws saying what is left when not.
   */
  stoppedKeepingVolume(workload: string): Promise<boolean>;
  /**
   * How long after a stop `stoppedKeepingVolume` may take to hold. Kubernetes: the pod object goes
   * only once the kubelet has cleaned up (seconds).
   */
  readonly stoppedWithinMs: number;
  /** Which of the session's engine objects still exist, by kind (all false once deleted). */
  objects(workload: string): Promise<Record<string, boolean>>;
  /** Kills the workload from outside the system (docker kill / the pod deleted). */
  kill(workload: string): Promise<void>;
  /** A file's text inside the running workload. */
  readFile(workload: string, path: string): Promise<string>;
  /** The environment the workload's main process (the adapter) really has, as NAME=value. */
  processEnv(workload: string): Promise<string[]>;
  /**
   * Everything the engine was told about the workload, as text: `docker inspect` of the container
   * and its network / the Deployment, its pods and its Secret (values decoded).
   */
  specText(workload: string): Promise<string>;
  /** Names of engine workloads of ours whose name contains `fragment`. */
  workloadsNamed(fragment: string): Promise<string[]>;

  // ── what the agent-session lifecycle scenarios (agent-lifecycle-scenarios.ts) need ──
  /** A command in the running workload (the session container / the Ready pod's container); stdout. */
  exec(workload: string, argv: string[]): Promise<string>;
  /** The session workloads of an agent-sessions namespace, optionally one agent's (`<agent>-…` sessions). */
  workspacesOf(namespace: string, agent?: string): Promise<WorkspaceInfo[]>;
  /**
   * Removes the workload outside the system, so that nothing brings it back: `docker rm -f` of the
   * container / the Deployment deleted (its ReplicaSet and pod with it). The volume stays.
   */
  removeOutside(workload: string): Promise<void>;
  /** How many exec sessions the engine created in the workload at or after `sinceMs` (epoch ms). */
  execsSince(workload: string, sinceMs: number): Promise<number>;
  /** Sets the running workload's memory limit to what it uses now plus `headroomMiB`. */
  squeezeMemory(workload: string, headroomMiB: number): Promise<void>;
  /** The engine's own record that the workload's container was OOM-killed. */
  oomKilled(workload: string): Promise<boolean>;
  /**
   * The ERRORED reasons this engine's runner reports when a live session's workload is removed
   * outside (`removeOutside`) or killed outside (`kill`).
   */
  readonly reasons: { removed: string; killed: string };
  // ── what the runtime conformance suite (test/conformance) needs ──
  /** What the engine was told about the running workload's isolation (its container / pod spec). */
  isolation(workload: string): Promise<Isolation>;
  /** Where the host reaches the workload's adapter (the container's address / the Service via kube-proxy). */
  adapterUrl(workload: string): Promise<string>;
  /** The running workload's output as the engine returns it (`docker logs` / `kubectl logs`). */
  logs(workload: string): Promise<string>;
  /** Bytes the engine keeps on disk of the running workload's output (its json-file log and rotations). */
  logBytes(workload: string): Promise<number>;
  /**
   * The bound agent-sessions sets on `logBytes` (Docker: the json-file limits the provider gives
   * every container). Undefined where the node bounds it (Kubernetes: the kubelet's log rotation).
   */
  readonly logBound: number | undefined;
  /** Exit codes of the workload's adapter container that ended at or after `sinceMs` (epoch ms). */
  exitCodesSince(workload: string, sinceMs: number): Promise<number[]>;
  /** Force-removes every engine object left of a namespace's sessions; what it removed. Never throws. */
  forceRemove(namespace: string): Promise<string[]>;
  /** Ends what the probe keeps open (the 1.35 probe's pod watch); the probe is not used after. */
  close(): void;
}

/** What the engine was told about a workload's isolation. */
export type Isolation = {
  /** A TTY or an open stdin for the adapter (neither is ever given). */
  tty: boolean;
  stdin: boolean;
  readOnlyRoot: boolean;
  /** The uid the engine runs it as. */
  user: number | undefined;
  /** A Kubernetes service account token mounted (Docker has none). */
  serviceAccountToken: boolean;
};

const execFileAsync = promisify(execFile);

/** Exit codes dockerd recorded (`die` events) since `sinceMs` for containers whose name `matches`. */
async function dockerExitCodesSince(sinceMs: number, matches: (name: string) => boolean): Promise<number[]> {
  const out = await dockerCli(
    "events",
    "--since",
    (sinceMs / 1000).toFixed(3),
    "--until",
    (Date.now() / 1000 + 1).toFixed(3),
    "--filter",
    "event=die",
    "--format",
    "{{.Actor.Attributes.name}} {{.Actor.Attributes.exitCode}}",
  );
  return out
    .split("\n")
    .map((line) => line.trim().split(" "))
    .filter(([name, code]) => name && code !== undefined && matches(name))
    .map(([, code]) => Number(code));
}

/** The bytes of a dockerd container's json-file log and its rotated files (the test bed runs as root). */
async function dockerLogBytes(docker: Docker, container: string): Promise<number> {
  const path = (await docker.getContainer(container).inspect()).LogPath;
  if (!path) throw new Error(`${container} has no log file`);
  return logFileBytes(path);
}

/**
 * A log file's bytes with its rotated siblings (`<name>.<suffix>` beside it). A sibling the engine
 * rotates away between the listing and its stat (ENOENT; seen once in CI on a noisy compass
 * container) is skipped: its bytes are in the file it became or gone, as the bound wants.
 */
async function logFileBytes(path: string): Promise<number> {
  const name = basename(path);
  let total = 0;
  for (const file of await readdir(dirname(path))) {
    if (!file.startsWith(name)) continue;
    const size = await stat(join(dirname(path), file)).then(
      (s) => s.size,
      (error: NodeJS.ErrnoException) => {
        if (error.code === "ENOENT") return 0;
        throw error;
      },
    );
    total += size;
  }
  return total;
}

/**
 * The bytes of a containerd container's log and its rotated files: the kubelet's CRI log under its
 * podLogsDir (`crictl inspect`'s status.logPath; rotations beside it, `0.log.<timestamp>[.gz]`).
 */
async function crictlLogBytes(
  crictl: (...args: string[]) => Promise<string>,
  container: string,
): Promise<number> {
  const path = (JSON.parse(await crictl("inspect", container)) as { status?: { logPath?: string } }).status
    ?.logPath;
  if (!path) throw new Error(`${container} has no log file`);
  return logFileBytes(path);
}

/** The `docker` CLI against the test bed's dockerd (DOCKER_HOST); stdout. */
async function dockerCli(...args: string[]): Promise<string> {
  return (await execFileAsync("docker", args, { encoding: "utf8", maxBuffer: 16 * 1024 * 1024 })).stdout;
}

/** Exec sessions dockerd created since `sinceMs` in containers whose name `matches`. */
async function dockerExecsSince(sinceMs: number, matches: (name: string) => boolean): Promise<number> {
  const out = await dockerCli(
    "events",
    "--since",
    (sinceMs / 1000).toFixed(3),
    "--until",
    (Date.now() / 1000 + 1).toFixed(3),
    "--filter",
    "event=exec_create",
    "--format",
    "{{.Actor.Attributes.name}}",
  );
  return out.split("\n").filter((name) => name.trim() && matches(name.trim())).length;
}

/**
 * Exec sessions the 1.35 cluster's API server audited (pods/exec only, its audit log:
 * AGENT_SESSIONS_TESTBED_KUBERNETES_AUDIT_LOG) since `sinceMs` in pods of `workload`'s Deployment
 * (`<workload>-<hash>-<suffix>`); each counted once (an exec has a ResponseStarted and a
 * ResponseComplete entry under one auditID).
 */
async function auditedExecsSince(namespace: string, workload: string, sinceMs: number): Promise<number> {
  const path = process.env.AGENT_SESSIONS_TESTBED_KUBERNETES_AUDIT_LOG;
  if (!path)
    throw new Error('AGENT_SESSIONS_TESTBED_KUBERNETES_AUDIT_LOG unset: eval "$(scripts/testbed env)"');
  const ids = new Set<string>();
  for (const line of (await readFile(path, "utf8")).split("\n")) {
    if (!line.includes('"exec"')) continue;
    const e = JSON.parse(line) as {
      auditID: string;
      requestReceivedTimestamp: string;
      objectRef?: { resource?: string; subresource?: string; namespace?: string; name?: string };
    };
    const o = e.objectRef;
    if (o?.resource !== "pods" || o.subresource !== "exec" || o.namespace !== namespace) continue;
    if (!o.name?.startsWith(`${workload}-`.slice(0, 58))) continue;
    if (new Date(e.requestReceivedTimestamp).getTime() >= sinceMs) ids.add(e.auditID);
  }
  return ids.size;
}

/** Sets a dockerd container's memory limit (and swap, so it cannot swap instead) to `MiB`. */
async function dockerLimitMemory(container: string, usageBytes: number, headroomMiB: number): Promise<void> {
  const limitMiB = Math.ceil(usageBytes / 1024 / 1024) + headroomMiB;
  await dockerCli("update", "--memory", `${limitMiB}m`, "--memory-swap", `${limitMiB}m`, container);
}

/** The memory a container's cgroup (v1) uses, read from inside it. */
const CGROUP_MEMORY_USAGE = "/sys/fs/cgroup/memory/memory.usage_in_bytes";

function dockerStatus(e: unknown): Promise<false> {
  return (e as { statusCode?: number }).statusCode === 404 ? Promise.resolve(false) : Promise.reject(e);
}

export function dockerProbe(docker: Docker = dockerClient()): EngineProbe {
  const containerExists = (name: string) =>
    docker
      .getContainer(name)
      .inspect()
      .then(() => true, dockerStatus);
  const volumeExists = (name: string) =>
    docker
      .getVolume(name)
      .inspect()
      .then(() => true, dockerStatus);
  const networkExists = async (name: string) =>
    (await docker.listNetworks({ filters: JSON.stringify({ name: [name] }) })).some((n) => n.Name === name);
  const exec = async (w: string, argv: string[]) => {
    const { exitCode, output } = await dockerExec(docker.getContainer(w), argv);
    if (exitCode !== 0) throw new Error(`${argv.join(" ")} in ${w} exited ${exitCode}: ${output}`);
    return output;
  };
  const namespaceFilter = (namespace: string) =>
    JSON.stringify({ label: [`${Labels.namespace}=${namespace}`] });
  return {
    engine: "docker",
    running: async (w) =>
      docker
        .getContainer(w)
        .inspect()
        .then((i) => i.State.Running, dockerStatus),
    stoppedKeepingVolume: async (w) => !(await containerExists(w)) && (await volumeExists(`${w}-workspace`)),
    objects: async (w) => ({
      container: await containerExists(w),
      network: await networkExists(`${w}-net`),
      volume: await volumeExists(`${w}-workspace`),
    }),
    kill: async (w) => {
      await docker.getContainer(w).kill();
    },
    readFile: async (w, path) => (await dockerExec(docker.getContainer(w), ["cat", path])).output,
    processEnv: async (w) => (await docker.getContainer(w).inspect()).Config.Env,
    specText: async (w) =>
      JSON.stringify([
        await docker.getContainer(w).inspect(),
        await docker
          .getNetwork(`${w}-net`)
          .inspect()
          .catch(() => null),
      ]),
    workloadsNamed: async (fragment) =>
      (
        await docker.listContainers({
          all: true,
          filters: JSON.stringify({ label: [`${Labels.managedBy}=agent-sessions`] }),
        })
      )
        .flatMap((c) => c.Names)
        .filter((n) => n.includes(fragment)),
    exec,
    workspacesOf: async (namespace, agent) =>
      (await docker.listContainers({ all: true, filters: namespaceFilter(namespace) }))
        .map(
          (c): WorkspaceInfo => ({
            name: (c.Names[0] ?? "").replace(/^\//, ""),
            state: c.State === "running" ? "running" : "stopped",
            session: c.Labels[Labels.session] ?? "",
          }),
        )
        .filter((c) => agent === undefined || c.session.startsWith(`${agent}-`))
        .sort((a, b) => a.name.localeCompare(b.name)),
    removeOutside: async (w) => {
      await dockerCli("rm", "-f", w);
    },
    execsSince: (w, sinceMs) => dockerExecsSince(sinceMs, (name) => name === w),
    squeezeMemory: async (w, headroomMiB) =>
      dockerLimitMemory(w, Number((await exec(w, ["cat", CGROUP_MEMORY_USAGE])).trim()), headroomMiB),
    oomKilled: async (w) => (await docker.getContainer(w).inspect()).State.OOMKilled,
    isolation: async (w) => {
      const info = await docker.getContainer(w).inspect();
      const user = info.Config.User.split(":")[0];
      return {
        tty: info.Config.Tty,
        stdin: info.Config.OpenStdin,
        readOnlyRoot: info.HostConfig.ReadonlyRootfs === true,
        user: user ? Number(user) : undefined,
        serviceAccountToken: false,
      };
    },
    adapterUrl: async (w) => {
      const info = await docker.getContainer(w).inspect();
      const ip = Object.values(info.NetworkSettings.Networks)[0]?.IPAddress;
      if (!ip) throw new Error(`${w} has no address`);
      return `http://${ip}:${ADAPTER_PORT}`;
    },
    logs: async (w) => (await docker.getContainer(w).logs({ stdout: true, stderr: true })).toString(),
    logBytes: (w) => dockerLogBytes(docker, w),
    logBound: CONTAINER_LOG_MAX_BYTES_PER_FILE * CONTAINER_LOG_MAX_FILES,
    exitCodesSince: (w, sinceMs) => dockerExitCodesSince(sinceMs, (name) => name === w),
    // `docker kill` is SIGKILL: exit 137 without an oom event.
    reasons: { removed: "ContainerRemoved", killed: "ContainerExited" },
    stoppedWithinMs: 60_000,
    close: () => {},
    forceRemove: async (namespace) => {
      const forced: string[] = [];
      const filters = namespaceFilter(namespace);
      const quietly = (p: Promise<unknown>) => p.catch(() => undefined);
      try {
        for (const c of await docker.listContainers({ all: true, filters })) {
          forced.push(`container ${c.Names[0]}`);
          await quietly(docker.getContainer(c.Id).remove({ force: true }));
        }
        for (const n of await docker.listNetworks({ filters })) {
          forced.push(`network ${n.Name}`);
          await quietly(docker.getNetwork(n.Id).remove());
        }
        for (const v of (await docker.listVolumes({ filters })).Volumes ?? []) {
          forced.push(`volume ${v.Name}`);
          await quietly(docker.getVolume(v.Name).remove({ force: true }));
        }
      } catch (error) {
        forced.push(`(listing failed: ${String(error)})`);
      }
      return forced;
    },
  };
}

/** The test bed's kubectl (its KUBECONFIG comes from the environment the test bed sets). */
export const kubectl = () => kubectlPath();

export async function kubernetesProbe(namespace = "agent-sessions"): Promise<EngineProbe> {
  const k: KubeClients = await kubeClients();
  // containerd: a deleted pod's containers go at once and no event log keeps their exits.
  const podExits = await PodExits.watch(namespace);
  /** The session's pods, found the way the runner finds them (the Deployment's selector). */
  const pods = async (workload: string): Promise<V1Pod[]> => {
    const d = await k.apps.readNamespacedDeployment({ name: workload, namespace });
    const selector = Object.entries(d.spec?.selector.matchLabels ?? {})
      .map(([key, v]) => `${key}=${v}`)
      .join(",");
    return (await k.core.listNamespacedPod({ namespace, labelSelector: selector })).items;
  };
  const readyPod = async (workload: string): Promise<string> => {
    const pod = (await pods(workload)).find(isPodReady)?.metadata?.name;
    if (!pod) throw new Error(`${workload} has no Ready pod`);
    return pod;
  };
  const exec = async (workload: string, argv: string[]): Promise<string> => {
    const pod = await readyPod(workload);
    const { stdout } = await execFileAsync(
      kubectl(),
      ["-n", namespace, "exec", pod, "-c", ADAPTER_CONTAINER, "--", ...argv],
      {
        encoding: "utf8",
        maxBuffer: 16 * 1024 * 1024,
      },
    );
    return stdout;
  };
  const exists = async (read: () => Promise<unknown>) => !(await isGone(read));
  const ofNamespace = (ns: string) => `${Labels.managedBy}=agent-sessions,${Labels.namespace}=${ns}`;
  /** The cluster's crictl (its kubelet runs containerd), with the config beside its kubeconfig; stdout. */
  const crictl = async (...args: string[]): Promise<string> =>
    (
      await execFileAsync(
        join(dirname(kubectlPath()), "crictl"),
        ["--config", join(dirname(process.env.KUBECONFIG ?? ""), "crictl.yaml"), ...args],
        { encoding: "utf8", maxBuffer: 16 * 1024 * 1024 },
      )
    ).stdout;
  /** containerd's container behind the workload's Ready pod. */
  const runtimeContainer = async (workload: string): Promise<string> => {
    const pod = await readyPod(workload);
    const id = (
      await crictl(
        "ps",
        "-q",
        "--label",
        `io.kubernetes.pod.namespace=${namespace}`,
        "--label",
        `io.kubernetes.pod.name=${pod}`,
        "--label",
        "io.kubernetes.container.name=adapter",
      )
    ).trim();
    if (!id || id.includes("\n")) throw new Error(`pod ${pod}: adapter container ${JSON.stringify(id)}`);
    return id;
  };
  return {
    engine: "kubernetes",
    running: async (w) => {
      const d = await k.apps.readNamespacedDeployment({ name: w, namespace });
      return d.spec?.replicas === 1 && d.status?.readyReplicas === 1 && (await pods(w)).some(isPodReady);
    },
    stoppedKeepingVolume: async (w) => {
      const d = await k.apps.readNamespacedDeployment({ name: w, namespace });
      const pvc = await k.core.readNamespacedPersistentVolumeClaim({ name: `${w}-workspace`, namespace });
      const left = (await pods(w)).map((p) => `${p.metadata?.name}:${p.status?.phase}`);
      if (d.spec?.replicas === 0 && left.length === 0 && pvc.status?.phase === "Bound") return true;
      // Thrown, not false: a wait on it reports what is still there.
      throw new Error(
        `replicas ${d.spec?.replicas} (status ${d.status?.replicas ?? 0}), pods [${left.join(" ")}], pvc ${pvc.status?.phase}`,
      );
    },
    objects: async (w) => ({
      deployment: await exists(() => k.apps.readNamespacedDeployment({ name: w, namespace })),
      service: await exists(() => k.core.readNamespacedService({ name: w, namespace })),
      networkPolicy: await exists(() => k.networking.readNamespacedNetworkPolicy({ name: w, namespace })),
      pvc: await exists(() =>
        k.core.readNamespacedPersistentVolumeClaim({ name: `${w}-workspace`, namespace }),
      ),
      secret: await exists(() => k.core.readNamespacedSecret({ name: `${w}-credentials`, namespace })),
    }),
    kill: async (w) => {
      // Deleted outside the system, at once: the Deployment's ReplicaSet makes a new pod.
      await k.core.deleteNamespacedPod({ name: await readyPod(w), namespace, gracePeriodSeconds: 0 });
    },
    readFile: (w, path) => exec(w, ["cat", path]),
    specText: async (w) => {
      const secret = await k.core
        .readNamespacedSecret({ name: `${w}-credentials`, namespace })
        .catch(() => undefined);
      const decoded = Object.fromEntries(
        Object.entries(secret?.data ?? {}).map(([key, v]) => [
          key,
          Buffer.from(v, "base64").toString("utf8"),
        ]),
      );
      return JSON.stringify([
        await k.apps.readNamespacedDeployment({ name: w, namespace }),
        await pods(w),
        secret ?? null,
        decoded,
      ]);
    },
    processEnv: async (w) =>
      (await exec(w, ["cat", "/proc/1/environ"])).split("\0").filter((line) => line.length > 0),
    workloadsNamed: async (fragment) =>
      (
        await k.apps.listNamespacedDeployment({
          namespace,
          labelSelector: `${Labels.managedBy}=agent-sessions`,
        })
      ).items
        .map((d) => d.metadata?.name ?? "")
        .filter((n) => n.includes(fragment)),
    exec,
    workspacesOf: async (ns, agent) => {
      const labelSelector = ofNamespace(ns);
      const deployments = (await k.apps.listNamespacedDeployment({ namespace, labelSelector })).items;
      const out: WorkspaceInfo[] = [];
      for (const d of deployments) {
        const name = d.metadata?.name ?? "";
        const session = d.metadata?.labels?.[Labels.session] ?? "";
        if (agent !== undefined && !session.startsWith(`${agent}-`)) continue;
        const ready = (await pods(name)).some(isPodReady);
        out.push({
          name,
          session,
          state:
            ready && d.spec?.replicas === 1 ? "running" : d.spec?.replicas === 0 ? "stopped" : "starting",
        });
      }
      return out.sort((a, b) => a.name.localeCompare(b.name));
    },
    removeOutside: async (w) => {
      // Foreground: the Deployment goes once its ReplicaSet and pod are gone; like `docker rm -f`,
      // this returns when nothing of the workload is left.
      const selector = (await k.apps.readNamespacedDeployment({ name: w, namespace })).spec?.selector
        .matchLabels;
      await k.apps.deleteNamespacedDeployment({
        name: w,
        namespace,
        body: { propagationPolicy: "Foreground", gracePeriodSeconds: 0 },
      });
      const labelSelector = Object.entries(selector ?? {})
        .map(([key, v]) => `${key}=${v}`)
        .join(",");
      await until(
        `Deployment ${w} and its pods gone`,
        async () =>
          (await isGone(() => k.apps.readNamespacedDeployment({ name: w, namespace }))) &&
          (await k.core.listNamespacedPod({ namespace, labelSelector })).items.length === 0,
        120_000,
      );
    },
    // containerd keeps no exec history: the API server's audit log records every pods/exec
    // (scripts/testbed.d/kubernetes.sh audits only those, at Metadata level).
    execsSince: (w, sinceMs) => auditedExecsSince(namespace, w, sinceMs),
    squeezeMemory: async (w, headroomMiB) => {
      // A changed limit in the Deployment replaces the pod; the limit is tightened where the
      // kubelet put it instead: the pod container's cgroup, through the node's runtime.
      const usage = Number((await exec(w, ["cat", CGROUP_MEMORY_USAGE])).trim());
      // containerd (CRI UpdateContainerResources); the machine has no swap to escape to.
      const limit = (Math.ceil(usage / 1024 / 1024) + headroomMiB) * 1024 * 1024;
      await crictl("update", "--memory", String(limit), await runtimeContainer(w));
    },
    oomKilled: async (w) =>
      (await pods(w)).some((p) =>
        (p.status?.containerStatuses ?? []).some(
          (c) =>
            c.lastState?.terminated?.reason === "OOMKilled" || c.state?.terminated?.reason === "OOMKilled",
        ),
      ),
    isolation: async (w) => {
      const pod = (await pods(w)).find(isPodReady);
      const container = pod?.spec?.containers.find((c) => c.name === "adapter");
      if (!pod?.spec || !container) throw new Error(`${w} has no Ready pod with an adapter container`);
      return {
        tty: container.tty === true,
        stdin: container.stdin === true,
        readOnlyRoot: container.securityContext?.readOnlyRootFilesystem === true,
        user: container.securityContext?.runAsUser ?? pod.spec.securityContext?.runAsUser,
        serviceAccountToken:
          pod.spec.automountServiceAccountToken !== false ||
          (container.volumeMounts ?? []).some((m) =>
            m.mountPath.startsWith("/var/run/secrets/kubernetes.io"),
          ),
      };
    },
    adapterUrl: async (w) => {
      const ip = (await k.core.readNamespacedService({ name: w, namespace })).spec?.clusterIP;
      if (!ip) throw new Error(`Service ${w} has no ClusterIP`);
      return `http://${ip}:${ADAPTER_PORT}`;
    },
    logs: async (w) =>
      (
        await execFileAsync(kubectl(), ["-n", namespace, "logs", await readyPod(w), "-c", "adapter"], {
          encoding: "utf8",
          maxBuffer: 64 * 1024 * 1024,
        })
      ).stdout,
    logBytes: async (w) => crictlLogBytes(crictl, await runtimeContainer(w)),
    logBound: undefined,
    // A pod's name is generated from its ReplicaSet's (`<deployment>-<hash>-`) cut to 58
    // characters before its random suffix.
    exitCodesSince: async (w, sinceMs) => podExits.since(`${w}-`.slice(0, 58), sinceMs),
    close: () => podExits.close(),
    stoppedWithinMs: KUBERNETES_STOPPED_WITHIN_MS,
    // Removing the Deployment deletes its pod; deleting the pod alone too (the ReplicaSet replaces it).
    reasons: { removed: "PodDeleted", killed: "PodDeleted" },
    forceRemove: async (ns) => {
      const forced: string[] = [];
      const labelSelector = ofNamespace(ns);
      const quietly = (p: Promise<unknown>) => p.catch(() => undefined);
      try {
        for (const d of (await k.apps.listNamespacedDeployment({ namespace, labelSelector })).items) {
          forced.push(`deployment ${d.metadata?.name}`);
          await quietly(k.apps.deleteNamespacedDeployment({ name: d.metadata?.name ?? "", namespace }));
        }
        for (const s of (await k.core.listNamespacedService({ namespace, labelSelector })).items) {
          forced.push(`service ${s.metadata?.name}`);
          await quietly(k.core.deleteNamespacedService({ name: s.metadata?.name ?? "", namespace }));
        }
        for (const p of (await k.networking.listNamespacedNetworkPolicy({ namespace, labelSelector }))
          .items) {
          forced.push(`networkpolicy ${p.metadata?.name}`);
          await quietly(
            k.networking.deleteNamespacedNetworkPolicy({ name: p.metadata?.name ?? "", namespace }),
          );
        }
        for (const s of (await k.core.listNamespacedSecret({ namespace, labelSelector })).items) {
          forced.push(`secret ${s.metadata?.name}`);
          await quietly(k.core.deleteNamespacedSecret({ name: s.metadata?.name ?? "", namespace }));
        }
        for (const c of (await k.core.listNamespacedPersistentVolumeClaim({ namespace, labelSelector }))
          .items) {
          forced.push(`pvc ${c.metadata?.name}`);
          await quietly(
            k.core.deleteNamespacedPersistentVolumeClaim({ name: c.metadata?.name ?? "", namespace }),
          );
        }
      } catch (error) {
        forced.push(`(listing failed: ${String(error)})`);
      }
      return forced;
    },
  };
}
