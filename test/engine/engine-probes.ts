/**
 * What an end-to-end test checks on the engine itself, behind one small interface: the Docker
 * probe asks dockerd (inspect, list), the Kubernetes probe asks the test bed's API server and
 * execs with its kubectl. Scenarios written against it run on either engine unchanged.
 */
import { execFile } from "node:child_process";
import { join } from "node:path";
import { promisify } from "node:util";
import type { V1Pod } from "@kubernetes/client-node";
import type Docker from "dockerode";
import { Labels } from "../../contracts/session-spec.ts";
import { isPodReady } from "../../runner/kubernetes.ts";
import { isGone, type KubeClients, kubeClients } from "./kube-harness.ts";
import { dockerClient, dockerExec } from "./session-harness.ts";
import { testbedHome } from "./testbed.ts";

export type Engine = "docker" | "kubernetes";

export interface EngineProbe {
  readonly engine: Engine;
  /** The workload runs: the container is Running / the Deployment has its one Ready pod. */
  running(workload: string): Promise<boolean>;
  /**
   * Stopped with the volume kept: no container / Deployment at replicas 0 and no pod; volume / PVC
   * there. Throws saying what is left when not.
   */
  stoppedKeepingVolume(workload: string): Promise<boolean>;
  /** Which of the session's engine objects still exist, by kind (all false once deleted). */
  objects(workload: string): Promise<Record<string, boolean>>;
  /** Kills the workload from outside the system (docker kill / the pod deleted). */
  kill(workload: string): Promise<void>;
  /** A file's text inside the running workload. */
  readFile(workload: string, path: string): Promise<string>;
  /** The environment the workload's main process (the adapter) really has, as NAME=value. */
  processEnv(workload: string): Promise<string[]>;
  /** Names of engine workloads of ours whose name contains `fragment`. */
  workloadsNamed(fragment: string): Promise<string[]>;
}

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
    workloadsNamed: async (fragment) =>
      (
        await docker.listContainers({
          all: true,
          filters: JSON.stringify({ label: [`${Labels.managedBy}=agent-sessions`] }),
        })
      )
        .flatMap((c) => c.Names)
        .filter((n) => n.includes(fragment)),
  };
}

const execFileAsync = promisify(execFile);

/** The test bed's kubectl (its KUBECONFIG comes from the environment the test bed sets). */
export const kubectl = () => join(testbedHome, "kubernetes", "bin", "kubectl");

export async function kubernetesProbe(namespace = "agent-sessions"): Promise<EngineProbe> {
  const k: KubeClients = await kubeClients();
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
    const { stdout } = await execFileAsync(kubectl(), ["-n", namespace, "exec", pod, "--", ...argv], {
      encoding: "utf8",
      maxBuffer: 16 * 1024 * 1024,
    });
    return stdout;
  };
  const exists = async (read: () => Promise<unknown>) => !(await isGone(read));
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
  };
}
