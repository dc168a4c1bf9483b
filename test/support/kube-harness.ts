/**
 * The test bed's Kubernetes cluster for engine tests: API clients from its KUBECONFIG, and a
 * check that fails (never skips) with the fix when the cluster is not up.
 */
import { existsSync } from "node:fs";
import { AppsV1Api, CoreV1Api, KubeConfig, NetworkingV1Api } from "@kubernetes/client-node";

export type KubeClients = { core: CoreV1Api; apps: AppsV1Api; networking: NetworkingV1Api };

/** Clients of the test bed's cluster, once its API server answers and its node is Ready. */
export async function kubeClients(): Promise<KubeClients> {
  const kubeconfig = process.env.KUBECONFIG;
  if (!kubeconfig || !existsSync(kubeconfig)) {
    throw new Error(`KUBECONFIG (${kubeconfig}) missing: run scripts/testbed up kubernetes`);
  }
  const kc = new KubeConfig();
  kc.loadFromFile(kubeconfig);
  const clients = {
    core: kc.makeApiClient(CoreV1Api),
    apps: kc.makeApiClient(AppsV1Api),
    networking: kc.makeApiClient(NetworkingV1Api),
  };
  const nodes = await clients.core.listNode().catch((error: unknown) => {
    throw new Error(
      `the test bed's API server does not answer (${String(error)}): run scripts/testbed up kubernetes`,
    );
  });
  const ready = nodes.items.some((n) =>
    n.status?.conditions?.some((c) => c.type === "Ready" && c.status === "True"),
  );
  if (!ready) throw new Error("no Ready node in the test bed's cluster: run scripts/testbed up kubernetes");
  return clients;
}

/** Creates the namespace unless it exists. */
export async function ensureNamespace(core: CoreV1Api, name: string): Promise<void> {
  try {
    await core.readNamespace({ name });
  } catch (error) {
    if ((error as { code?: number }).code !== 404) throw error;
    await core.createNamespace({ body: { metadata: { name } } });
  }
}

/** True when reading the object answers 404. */
export async function isGone(read: () => Promise<unknown>): Promise<boolean> {
  try {
    await read();
    return false;
  } catch (error) {
    if ((error as { code?: number }).code === 404) return true;
    throw error;
  }
}
