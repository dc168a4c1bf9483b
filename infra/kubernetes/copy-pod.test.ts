import { describe, expect, it } from "vitest";
import { SnapshotStackSpec } from "../../contracts/session-spec.ts";
import { judgeAll, judgeResource } from "../../policies/judge.ts";
import { SnapshotLabels } from "../../contracts/session-snapshot.ts";
import { copyNetworkPolicyManifest, copyPodManifest } from "./copy-pod.ts";
import { snapshotPvcManifest } from "./snapshot-manifest.ts";

const image = `127.0.0.1:5000/agent-sessions/base@sha256:${"a".repeat(64)}`;
const spec = SnapshotStackSpec.parse({
  engine: "kubernetes",
  target: {
    storage: "ss-team--before-refactor",
    namespace: "team",
    name: "before-refactor",
    kubernetes: { namespace: "agent-sessions", storageClassName: "standard" },
  },
  storageRequest: "64Mi",
});
const pvc = snapshotPvcManifest(spec);
const sessionPvc = { ...pvc, metadata: { ...pvc.metadata, name: "as-team-s-workspace" } };
const pod = copyPodManifest({
  name: "ss-copy-0123456789",
  namespace: "agent-sessions",
  image,
  mounts: [
    { claimName: "as-team-s-workspace", mountPath: "/from", readOnly: true },
    { claimName: pvc.metadata.name, mountPath: "/to", readOnly: false },
  ],
  labels: { [SnapshotLabels.snapshot]: "before-refactor" },
});
const policy = copyNetworkPolicyManifest("ss-copy-0123456789", "agent-sessions");
const resources = [
  { type: "kubernetes:core/v1:PersistentVolumeClaim", name: "snapshot", props: pvc },
  { type: "kubernetes:core/v1:PersistentVolumeClaim", name: "session", props: sessionPvc },
  { type: "kubernetes:core/v1:Pod", name: "copy", props: pod },
  { type: "kubernetes:networking.k8s.io/v1:NetworkPolicy", name: "copy-policy", props: policy },
];

describe("a snapshot copy pod on Kubernetes", () => {
  it("the copy pod, its PVCs and its NetworkPolicy pass every policy of the pack", async () => {
    expect(await judgeAll(resources)).toEqual([]);
    // The pod is judged by the workload policies, not skipped as not applicable.
    const { judgedBy } = await judgeResource(resources[2] as (typeof resources)[number]);
    expect(judgedBy).toEqual(
      expect.arrayContaining([
        "no-service-account-token",
        "run-as-non-root",
        "read-only-root-filesystem",
        "capabilities-dropped",
        "seccomp-runtime-default",
        "narrowed-mounts",
        "resource-limits-set",
      ]),
    );
  });

  it("the copy pod mounts only the two PVCs, the source read-only, and a scratch /tmp in memory; no token or network", async () => {
    expect(pod.spec.automountServiceAccountToken).toBe(false);
    expect(pod.spec.securityContext.runAsUser).toBe(65532);
    expect(pod.spec.volumes).toEqual([
      { name: "v0", persistentVolumeClaim: { claimName: "as-team-s-workspace", readOnly: true } },
      { name: "v1", persistentVolumeClaim: { claimName: "ss-team--before-refactor", readOnly: false } },
      { name: "tmp", emptyDir: { medium: "Memory", sizeLimit: "64Mi" } },
    ]);
    expect(pod.spec.containers[0]?.volumeMounts.at(-1)).toEqual({ name: "tmp", mountPath: "/tmp" });
    // Its own NetworkPolicy selects it, and only it.
    expect(policy.metadata.name).toBe(pod.metadata.name);
    expect(policy.spec.podSelector.matchLabels).toEqual({
      "agent-sessions.dev/component": "snapshot-copy",
      "agent-sessions.dev/copy-pod": pod.metadata.name,
    });
    expect(pod.metadata.labels).toMatchObject(policy.spec.podSelector.matchLabels);
    expect(policy.spec).toMatchObject({ policyTypes: ["Ingress", "Egress"], ingress: [], egress: [] });
  });

  it("a copy pod without its NetworkPolicy is refused by the pack", async () => {
    const violations = await judgeAll(resources.slice(0, 3));
    expect(violations.map((v) => v.policy)).toContain("network-policy-selects-every-session-pod");
  });

  it("a copy pod mounting a claim outside its stack, or a hostPath, is refused", async () => {
    const hostPath = {
      ...pod,
      spec: { ...pod.spec, volumes: [...pod.spec.volumes, { name: "host", hostPath: { path: "/" } }] },
    };
    const violations = await judgeAll([
      ...resources.slice(0, 1),
      { ...resources[2], props: hostPath },
      resources[3],
    ] as typeof resources);
    expect(violations.map((v) => v.policy).sort()).toEqual(["mounts-only-stack-volumes", "narrowed-mounts"]);
  });
});
