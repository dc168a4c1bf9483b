/**
 * A Kubernetes session: a PVC (the workspace, survives scale-down), a Secret with the Agent's
 * allowed credentials and the adapter token, a Deployment (replicas 1 or 0, Recreate) whose pod
 * is hardened and mounts nothing but the session volume and a small /tmp, a ClusterIP Service
 * the runner reaches the adapter through, and a NetworkPolicy: ingress only from the runner,
 * egress only to DNS and the Agent's allowed endpoints.
 *
 * "Running" = the Deployment asks for 1 replica; "Ready" = that pod passes /readyz.
 */
import * as k8s from "@pulumi/kubernetes";
import * as pulumi from "@pulumi/pulumi";
import { ADAPTER_PORT } from "../contracts/adapter.ts";
import { ADAPTER_CONTAINER, WORKSPACE_CONTAINER, WORKSPACE_SCRATCH } from "../contracts/session-pod.ts";
import { Labels, type SessionSpec, workloadName } from "../contracts/session-spec.ts";

/**
 * What the scheduler reserves for a session's CPU: a tenth of its limit (at least 10m). CPU is
 * compressible and a session idles between requests, so reserving the whole limit (500m by
 * default) let a 2-core node hold three sessions and left the fourth Pending with "Insufficient
 * cpu". The limit still caps what a busy session takes. Memory is not compressible: its request
 * stays equal to its limit, so a node never promises memory it does not have.
 */
export function cpuRequestOf(limit: string): string {
  const millicores = limit.endsWith("m") ? Number(limit.slice(0, -1)) : Number(limit) * 1000;
  return `${Math.max(10, Math.floor(millicores / 10))}m`;
}

/**
 * Waits for execs and ends at once on SIGTERM (a bare `sleep` as PID 1 would ignore it and hold
 * the pod's termination for its whole grace period).
 */
const SIDECAR_SCRIPT = 'trap "exit 0" TERM INT; while :; do sleep 3600 & wait $!; done';

/** The container hardening every session container shares (the policy pack checks each). */
const hardened = {
  allowPrivilegeEscalation: false,
  privileged: false,
  readOnlyRootFilesystem: true,
  runAsNonRoot: true,
  capabilities: { drop: ["ALL"] },
  seccompProfile: { type: "RuntimeDefault" },
};

/**
 * The `workspace` sidecar: the runner's git image idling, the session volume at /workspace and a
 * scratch emptyDir of its own; hardened like the adapter, no credentials, no ports. It shares the
 * pod's network, so a seed's fetch reaches exactly what the session's NetworkPolicy allows.
 */
function workspaceSidecar(image: string): k8s.types.input.core.v1.Container {
  return {
    name: WORKSPACE_CONTAINER,
    image,
    imagePullPolicy: "IfNotPresent",
    command: ["/bin/sh", "-c", SIDECAR_SCRIPT],
    env: [
      { name: "HOME", value: WORKSPACE_SCRATCH },
      { name: "TMPDIR", value: WORKSPACE_SCRATCH },
    ],
    workingDir: "/workspace",
    securityContext: hardened,
    // git fetches and diffs need memory now and then; idle it takes ~1 MiB.
    resources: { requests: { cpu: "10m", memory: "32Mi" }, limits: { cpu: "500m", memory: "256Mi" } },
    volumeMounts: [
      { name: "workspace", mountPath: "/workspace" },
      { name: "workspace-scratch", mountPath: WORKSPACE_SCRATCH },
    ],
  };
}

export interface KubernetesSessionArgs {
  spec: SessionSpec;
  credentials: pulumi.Input<Record<string, string>>;
  adapterToken: pulumi.Input<string>;
  provider?: k8s.Provider;
}

export class KubernetesSession extends pulumi.ComponentResource {
  readonly resolvedImageDigest: pulumi.Output<string>;
  readonly workloadName: pulumi.Output<string>;
  readonly endpoint: pulumi.Output<string>;
  readonly volumeName: pulumi.Output<string>;

  constructor(name: string, args: KubernetesSessionArgs, opts?: pulumi.ComponentResourceOptions) {
    super("agent-sessions:kubernetes:Session", name, {}, opts);
    const { spec } = args;
    const base = workloadName(spec.namespace, spec.name);
    const namespace = spec.kubernetes.namespace;
    const workspaceImage = spec.kubernetes.workspaceImage;
    const selector = {
      [Labels.session]: spec.name,
      [Labels.namespace]: spec.namespace,
      [Labels.component]: "session",
    };
    const labels = { ...selector, [Labels.managedBy]: "agent-sessions" };
    const child = { parent: this, ...(args.provider ? { provider: args.provider } : {}) };

    const credentialNames = pulumi.output(args.credentials).apply((c) => Object.keys(c).sort());
    const secret = new k8s.core.v1.Secret(
      `${name}-credentials`,
      {
        metadata: { name: `${base}-credentials`, namespace, labels },
        type: "Opaque",
        stringData: pulumi.secret(
          pulumi
            .all([args.credentials, args.adapterToken])
            .apply(([c, token]) => ({ ...c, ADAPTER_TOKEN: token })),
        ),
      },
      child,
    );

    const pvc = new k8s.core.v1.PersistentVolumeClaim(
      `${name}-workspace`,
      {
        metadata: { name: `${base}-workspace`, namespace, labels },
        spec: {
          accessModes: ["ReadWriteOnce"],
          resources: { requests: { storage: `${spec.resources.storageMiB}Mi` } },
          ...(spec.kubernetes.storageClassName ? { storageClassName: spec.kubernetes.storageClassName } : {}),
        },
      },
      { ...child, protect: false },
    );

    const env = credentialNames.apply((names) => [
      ...Object.entries(spec.env).map(([k, v]) => ({ name: k, value: v })),
      { name: "ADAPTER_PORT", value: String(ADAPTER_PORT) },
      { name: "ADAPTER_STREAMING", value: String(spec.streaming) },
      { name: "AGENT_WORKSPACE", value: "/workspace" },
      ...[...names, "ADAPTER_TOKEN"].map((k) => ({
        name: k,
        valueFrom: { secretKeyRef: { name: `${base}-credentials`, key: k } },
      })),
    ]);

    const deployment = new k8s.apps.v1.Deployment(
      `${name}-deployment`,
      {
        metadata: { name: base, namespace, labels },
        spec: {
          replicas: spec.replicas,
          strategy: { type: "Recreate" },
          selector: { matchLabels: selector },
          template: {
            metadata: {
              labels,
              // With the sidecar, `kubectl exec` without -c still lands in the agent's container.
              ...(workspaceImage
                ? { annotations: { "kubectl.kubernetes.io/default-container": ADAPTER_CONTAINER } }
                : {}),
            },
            spec: {
              automountServiceAccountToken: false,
              enableServiceLinks: false,
              securityContext: {
                runAsNonRoot: true,
                runAsUser: 65532,
                runAsGroup: 65532,
                fsGroup: 65532,
                seccompProfile: { type: "RuntimeDefault" },
              },
              containers: [
                {
                  name: ADAPTER_CONTAINER,
                  image: spec.image,
                  imagePullPolicy: "IfNotPresent",
                  env,
                  ports: [{ name: "adapter", containerPort: ADAPTER_PORT, protocol: "TCP" }],
                  securityContext: hardened,
                  resources: {
                    requests: {
                      cpu: cpuRequestOf(spec.resources.cpu),
                      memory: `${spec.resources.memoryMiB}Mi`,
                    },
                    limits: { cpu: spec.resources.cpu, memory: `${spec.resources.memoryMiB}Mi` },
                  },
                  readinessProbe: {
                    httpGet: { path: "/readyz", port: ADAPTER_PORT },
                    periodSeconds: 1,
                    failureThreshold: 3,
                  },
                  livenessProbe: {
                    httpGet: { path: "/healthz", port: ADAPTER_PORT },
                    periodSeconds: 10,
                    failureThreshold: 3,
                  },
                  volumeMounts: [
                    { name: "workspace", mountPath: "/workspace" },
                    { name: "tmp", mountPath: "/tmp" },
                  ],
                },
                ...(workspaceImage ? [workspaceSidecar(workspaceImage)] : []),
              ],
              volumes: [
                { name: "workspace", persistentVolumeClaim: { claimName: pvc.metadata.name } },
                { name: "tmp", emptyDir: { medium: "Memory", sizeLimit: "64Mi" } },
                ...(workspaceImage ? [{ name: "workspace-scratch", emptyDir: { sizeLimit: "256Mi" } }] : []),
              ],
            },
          },
        },
      },
      { ...child, dependsOn: [secret] },
    );

    const service = new k8s.core.v1.Service(
      `${name}-service`,
      {
        metadata: { name: base, namespace, labels },
        spec: {
          type: "ClusterIP",
          selector,
          ports: [{ name: "adapter", port: ADAPTER_PORT, targetPort: ADAPTER_PORT, protocol: "TCP" }],
        },
      },
      child,
    );

    // A podSelector alone selects pods in the policy's own namespace; a runner in another
    // namespace is matched by namespaceSelector AND podSelector in one peer (two peers would admit
    // every pod of those namespaces, or any namespace's pods with the runner's labels).
    const runnerPod = { podSelector: { matchLabels: spec.kubernetes.runnerSelector } };
    const runnerPeers: k8s.types.input.networking.v1.NetworkPolicyPeer[] = [
      spec.kubernetes.runnerNamespaceSelector
        ? { namespaceSelector: { matchLabels: spec.kubernetes.runnerNamespaceSelector }, ...runnerPod }
        : runnerPod,
      ...(spec.kubernetes.runnerCidr ? [{ ipBlock: { cidr: spec.kubernetes.runnerCidr } }] : []),
    ];
    new k8s.networking.v1.NetworkPolicy(
      `${name}-network-policy`,
      {
        metadata: { name: base, namespace, labels },
        spec: {
          podSelector: { matchLabels: selector },
          policyTypes: ["Ingress", "Egress"],
          ingress: [{ from: runnerPeers, ports: [{ port: ADAPTER_PORT, protocol: "TCP" }] }],
          egress: [
            {
              to: [{ namespaceSelector: {} }],
              ports: [
                { port: 53, protocol: "UDP" },
                { port: 53, protocol: "TCP" },
              ],
            },
            ...spec.egress.map((r) => ({
              to: [{ ipBlock: { cidr: r.cidr.includes("/") ? r.cidr : `${r.cidr}/32` } }],
              ports: [{ port: r.port, protocol: "TCP" }],
            })),
          ],
        },
      },
      child,
    );

    this.workloadName = deployment.metadata.name;
    this.volumeName = pvc.metadata.name;
    this.resolvedImageDigest = pulumi.output(spec.image.split("@")[1] ?? "");
    this.endpoint = pulumi.interpolate`${service.spec.clusterIP}:${ADAPTER_PORT}`;
    this.registerOutputs({
      resolvedImageDigest: this.resolvedImageDigest,
      workloadName: this.workloadName,
      endpoint: this.endpoint,
      volumeName: this.volumeName,
    });
  }
}
