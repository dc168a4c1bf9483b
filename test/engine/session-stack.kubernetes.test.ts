/**
 * A Kubernetes session's stack through StackManager (stacks/) against the test bed's cluster (real
 * kube-apiserver, kubelet, Pulumi CLI with the Kubernetes provider, the policy pack): up creates
 * the PVC, credentials Secret, Deployment, Service and NetworkPolicy with the hardened spec and
 * the pod becomes Ready; scaleDown keeps the PVC; resume is Ready again; destroy removes it all.
 * Every object is read back through the API, not from Pulumi's outputs.
 */
import { rmSync } from "node:fs";
import type { V1Pod } from "@kubernetes/client-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type SessionSpecInput, workloadName } from "../../contracts/session-spec.ts";
import type { StackManager } from "../../stacks/index.ts";
import { ensureNamespace, isGone, type KubeClients, kubeClients } from "../support/kube-harness.ts";
import { backendStateText, stackManagerFor, tempDir, uniqueName, until } from "../support/session-harness.ts";
import { applyTestbedEnv, referenceImage } from "../support/testbed.ts";

applyTestbedEnv();

const kubernetesNamespace = "agent-sessions";
const namespace = "engine";
const name = uniqueName("kube");
const stackName = `${namespace}--${name}`;
const base = workloadName(namespace, name);
const selector = `agent-sessions.dev/session=${name},agent-sessions.dev/namespace=${namespace}`;
const dataDir = tempDir("kubernetes-session-stack");
const secrets = {
  credentials: { MODEL_API_KEY: `sk-kube-${uniqueName("credential")}` },
  adapterToken: `adapter-${uniqueName("token")}`,
};
let kube: KubeClients;
let manager: StackManager;

const spec = (): SessionSpecInput => ({
  namespace,
  name,
  engine: "kubernetes",
  image: referenceImage().image,
  contract: "v1alpha2",
  resources: { cpu: "250m", memoryMiB: 128, storageMiB: 32 },
  kubernetes: {
    namespace: kubernetesNamespace,
    // Where a cluster enforces NetworkPolicy (1.35, AGENT_SESSIONS_TESTBED_KUBERNETES=current), the
    // host (this test, as a runner would) reaches the adapter only when the policy admits its address.
    ...(process.env.AGENT_SESSIONS_RUNNER_CIDR ? { runnerCidr: process.env.AGENT_SESSIONS_RUNNER_CIDR } : {}),
  },
});

const read = {
  pvc: () =>
    kube.core.readNamespacedPersistentVolumeClaim({
      name: `${base}-workspace`,
      namespace: kubernetesNamespace,
    }),
  secret: () =>
    kube.core.readNamespacedSecret({ name: `${base}-credentials`, namespace: kubernetesNamespace }),
  deployment: () => kube.apps.readNamespacedDeployment({ name: base, namespace: kubernetesNamespace }),
  service: () => kube.core.readNamespacedService({ name: base, namespace: kubernetesNamespace }),
  networkPolicy: () =>
    kube.networking.readNamespacedNetworkPolicy({ name: base, namespace: kubernetesNamespace }),
};

async function sessionPods(): Promise<V1Pod[]> {
  const pods = await kube.core.listNamespacedPod({ namespace: kubernetesNamespace, labelSelector: selector });
  return pods.items.filter((p) => !p.metadata?.deletionTimestamp);
}

function isReady(pod: V1Pod): boolean {
  return pod.status?.conditions?.some((c) => c.type === "Ready" && c.status === "True") ?? false;
}

/** The session's pods once exactly one of them is Ready and none other is left. */
function oneReadyPod(): Promise<V1Pod[]> {
  return until("one Ready session pod", 120, async () => {
    const pods = await sessionPods();
    return pods.length === 1 && isReady(pods[0]!) ? pods : undefined;
  });
}

beforeAll(async () => {
  kube = await kubeClients();
  await ensureNamespace(kube.core, kubernetesNamespace);
  ({ manager } = await stackManagerFor(dataDir));
});

afterAll(async () => {
  if (await manager?.exists(namespace, name).catch(() => false)) {
    await manager.destroy(namespace, name).catch((e: unknown) => console.error("cleanup destroy failed", e));
  }
  // Last resort after a failed destroy: the objects by name.
  const options = { namespace: kubernetesNamespace };
  const ignore = () => undefined;
  await kube?.apps.deleteNamespacedDeployment({ name: base, ...options }).catch(ignore);
  await kube?.core.deleteNamespacedService({ name: base, ...options }).catch(ignore);
  await kube?.networking.deleteNamespacedNetworkPolicy({ name: base, ...options }).catch(ignore);
  await kube?.core.deleteNamespacedSecret({ name: `${base}-credentials`, ...options }).catch(ignore);
  await kube?.core
    .deleteNamespacedPersistentVolumeClaim({ name: `${base}-workspace`, ...options })
    .catch(ignore);
  rmSync(dataDir, { recursive: true, force: true });
});

describe("a Kubernetes session stack (real CLI, Kubernetes provider and cluster)", () => {
  it("goes up: hardened Deployment, PVC, credentials Secret, ClusterIP Service, NetworkPolicy; the pod is Ready", async () => {
    const outputs = await manager.up(spec(), secrets);
    expect(outputs).toMatchObject({ workloadName: base, volumeName: `${base}-workspace`, replicas: 1 });

    const deployment = await read.deployment();
    expect(deployment.spec?.replicas).toBe(1);
    expect(deployment.spec?.strategy?.type).toBe("Recreate");
    const pod = deployment.spec?.template.spec;
    expect(pod?.automountServiceAccountToken).toBe(false);
    expect(pod?.securityContext).toMatchObject({ runAsNonRoot: true, runAsUser: 65532 });
    const container = pod?.containers[0];
    expect(container?.image).toBe(referenceImage().image);
    expect(container?.securityContext).toMatchObject({
      readOnlyRootFilesystem: true,
      allowPrivilegeEscalation: false,
      privileged: false,
      runAsNonRoot: true,
      capabilities: { drop: ["ALL"] },
    });
    expect(container?.resources?.limits).toEqual({ cpu: "250m", memory: "128Mi" });
    expect(pod?.volumes?.flatMap((v) => Object.keys(v).filter((k) => k !== "name")).sort()).toEqual([
      "emptyDir",
      "persistentVolumeClaim",
    ]);

    const pvc = await until("the PVC bound", 60, async () => {
      const claim = await read.pvc();
      return claim.status?.phase === "Bound" ? claim : undefined;
    });
    expect(pvc.spec?.resources?.requests?.storage).toBe("32Mi");

    const secret = await read.secret();
    expect(Object.keys(secret.data ?? {}).sort()).toEqual(["ADAPTER_TOKEN", "MODEL_API_KEY"]);

    const service = await read.service();
    expect(service.spec?.type).toBe("ClusterIP");
    expect(outputs.endpoint).toBe(`${service.spec?.clusterIP}:8080`);

    const policy = await read.networkPolicy();
    expect(policy.spec?.policyTypes?.sort()).toEqual(["Egress", "Ingress"]);
    expect(policy.spec?.podSelector?.matchLabels).toMatchObject({ "agent-sessions.dev/session": name });

    // The `up` does not await the rollout (skipAwait: the runner waits for Ready itself); the
    // session's one pod becomes Ready, without an API token.
    const pods = await oneReadyPod();
    expect(pods).toHaveLength(1);
    expect(pods[0]!.spec?.volumes?.map((v) => v.name).sort()).toEqual(["tmp", "workspace"]);
    // …and its adapter answers through the Service (kube-proxy, from the node).
    const ready = await until("the adapter through the Service", 30, async () => {
      const res = await fetch(`http://${outputs.endpoint}/readyz`, { signal: AbortSignal.timeout(2000) });
      return res.ok ? res.status : undefined;
    });
    expect(ready).toBe(200);
  });

  it("keeps the credentials and the adapter token out of the stack state, plain or base64", () => {
    const state = backendStateText(dataDir);
    expect(state).toContain(stackName);
    for (const value of [secrets.credentials.MODEL_API_KEY, secrets.adapterToken]) {
      expect(state).not.toContain(value);
      expect(state).not.toContain(Buffer.from(value).toString("base64"));
    }
  });

  it("scales down: replicas 0, no pod, the PVC kept", async () => {
    const outputs = await manager.scaleDown(namespace, name);
    expect(outputs.replicas).toBe(0);
    expect((await read.deployment()).spec?.replicas).toBe(0);
    await until("the session pod to be gone", 60, async () =>
      (await sessionPods()).length === 0 ? true : undefined,
    );
    expect((await read.pvc()).status?.phase).toBe("Bound");
  });

  it("resumes: one Ready pod again on the same PVC", async () => {
    const outputs = await manager.resume(namespace, name);
    expect(outputs.replicas).toBe(1);
    const pods = await oneReadyPod();
    expect(
      pods[0]!.spec?.volumes?.find((v) => v.name === "workspace")?.persistentVolumeClaim?.claimName,
    ).toBe(`${base}-workspace`);
  });

  it("destroys: every object and the stack are gone", async () => {
    await manager.destroy(namespace, name);
    for (const [kind, get] of Object.entries(read)) {
      expect(
        await until(`${kind} to be gone`, 60, async () => ((await isGone(get)) ? true : undefined)),
      ).toBe(true);
    }
    expect(await manager.list()).not.toContain(stackName);
  });
});
