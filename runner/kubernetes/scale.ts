/**
 * The engine side of the Kubernetes stop/resume fast path (runner/kubernetes/driver.ts, runner/engine/fast-path.ts):
 * a session's Deployment scaled through the API at once, and the check that every object of the
 * session the stack declares (infra/kubernetes/session.ts) is still there to scale.
 *
 * The scale is a merge patch of `spec.replicas` under the runner's own field manager. The `up`
 * recording it afterwards applies the same value, so the provider's server-side apply meets no
 * conflict (a conflict needs a different value) and owns the field again beside the runner.
 */
import {
  type AppsV1Api,
  type CoreV1Api,
  type NetworkingV1Api,
  PatchStrategy,
  setHeaderOptions,
  type V1Pod,
  type V1Service,
} from "@kubernetes/client-node";
import { isApiStatus } from "./pod-watch.ts";

/** The field manager the runner's own writes to session objects go under. */
export const RUNNER_FIELD_MANAGER = "agent-sessions-runner";

export type SessionApis = { core: CoreV1Api; apps: AppsV1Api; networking: NetworkingV1Api };

/** Sets the session Deployment's `spec.replicas`; its ReplicaSet makes or deletes the pod. */
export async function scaleDeployment(
  apps: AppsV1Api,
  namespace: string,
  workload: string,
  replicas: 0 | 1,
): Promise<void> {
  await apps.patchNamespacedDeployment(
    { name: workload, namespace, body: { spec: { replicas } }, fieldManager: RUNNER_FIELD_MANAGER },
    setHeaderOptions("Content-Type", PatchStrategy.MergePatch),
  );
}

/**
 * The session's Service when the Deployment, Service, Secret, PVC and NetworkPolicy of the
 * workload all exist and none is being deleted; undefined when one is missing or going.
 */
export async function intactSessionService(
  apis: SessionApis,
  namespace: string,
  workload: string,
): Promise<V1Service | undefined> {
  const present = <T extends { metadata?: { deletionTimestamp?: unknown } }>(read: Promise<T>) =>
    read.then(
      (object) => (object.metadata?.deletionTimestamp ? undefined : object),
      (e: unknown) => {
        if (isApiStatus(e, 404)) return undefined;
        throw e;
      },
    );
  const [deployment, service, secret, pvc, policy] = await Promise.all([
    present(apis.apps.readNamespacedDeployment({ name: workload, namespace })),
    present(apis.core.readNamespacedService({ name: workload, namespace })),
    present(apis.core.readNamespacedSecret({ name: `${workload}-credentials`, namespace })),
    present(apis.core.readNamespacedPersistentVolumeClaim({ name: `${workload}-workspace`, namespace })),
    present(apis.networking.readNamespacedNetworkPolicy({ name: workload, namespace })),
  ]);
  return deployment && secret && pvc && policy ? service : undefined;
}

/**
 * True once the session Service's Endpoints list the pod as ready: a pod turns Ready before the
 * endpoints controller (and then kube-proxy) routes the Service to it, and the runner reaches the
 * adapter through the Service.
 */
export async function serviceRoutesTo(
  core: CoreV1Api,
  namespace: string,
  workload: string,
  pod: V1Pod,
): Promise<boolean> {
  const ip = pod.status?.podIP;
  if (!ip) return false;
  const endpoints = await core.readNamespacedEndpoints({ name: workload, namespace }).catch((e: unknown) => {
    if (isApiStatus(e, 404)) return undefined;
    throw e;
  });
  return (endpoints?.subsets ?? []).some((s) => (s.addresses ?? []).some((a) => a.ip === ip));
}
