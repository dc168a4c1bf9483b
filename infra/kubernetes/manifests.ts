/**
 * The Kubernetes objects of one session, built once from its spec: what the session program's
 * component declares (infra/kubernetes/session.ts) and what the runner's fast create applies
 * itself before the stack records them (runner/kubernetes/fast-create.ts). One builder, so both
 * make the same objects and the recording `up` finds nothing to change.
 *
 * Plain objects with `apiVersion` and `kind` (the inputs @pulumi/kubernetes passes on); no Pulumi
 * SDK here: the runner never loads it.
 */
import { ADAPTER_PORT } from "../../contracts/adapter.ts";
import { ADAPTER_CONTAINER, WORKSPACE_CONTAINER, WORKSPACE_SCRATCH } from "../../contracts/session-pod.ts";
import {
  HARNESS_CONTRACT_ENV,
  Labels,
  type SessionSpec,
  workloadName,
} from "../../contracts/session-spec.ts";
import { SKILLS_DIR, SKILLS_VOLUME, skillFileContent, skillFilePath } from "../../contracts/skill-pack.ts";
import { hardenedContainerSecurityContext, hardenedPodSpec } from "./hardening.ts";

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

/**
 * The `workspace` sidecar: the runner's git image idling, the session volume at /workspace and a
 * scratch emptyDir of its own; hardened like the adapter, no credentials, no ports. It shares the
 * pod's network, so a seed's fetch reaches exactly what the session's NetworkPolicy allows.
 */
function workspaceSidecar(image: string) {
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
    securityContext: hardenedContainerSecurityContext(),
    // git fetches and diffs need memory now and then; idle it takes ~1 MiB.
    resources: { requests: { cpu: "10m", memory: "32Mi" }, limits: { cpu: "500m", memory: "256Mi" } },
    volumeMounts: [
      { name: "workspace", mountPath: "/workspace" },
      { name: "workspace-scratch", mountPath: WORKSPACE_SCRATCH },
    ],
  };
}

/** The names of a session's objects (the Deployment, Service and NetworkPolicy share the workload's). */
export function sessionObjectNames(spec: Pick<SessionSpec, "namespace" | "name">) {
  const base = workloadName(spec.namespace, spec.name);
  return {
    workload: base,
    secret: `${base}-credentials`,
    pvc: `${base}-workspace`,
    skills: `${base}-skills`,
  };
}

/** The labels selecting a session's pods (the Deployment's, the Service's, the NetworkPolicy's). */
export function sessionSelector(spec: Pick<SessionSpec, "namespace" | "name">): Record<string, string> {
  return { [Labels.session]: spec.name, [Labels.namespace]: spec.namespace, [Labels.component]: "session" };
}

/**
 * The port the session's container listens on: our adapter's, or an `openai-chat` harness's own
 * (`spec.session.port`). The Service keeps ADAPTER_PORT and targets it, so the runner's endpoint
 * through the ClusterIP is the same for both contracts.
 */
export function harnessPort(spec: Pick<SessionSpec, "session">): number {
  return spec.session?.port ?? ADAPTER_PORT;
}

/** The path its readiness is asked on: `/readyz` (ours), `/healthz` (an `openai-chat` harness). */
export function readyPath(spec: Pick<SessionSpec, "session">): string {
  return spec.session ? "/healthz" : "/readyz";
}

/** The adapter container's env: the spec's, the adapter's settings, each credential from the Secret. */
export function adapterEnv(spec: SessionSpec, credentialNames: readonly string[]) {
  const secretName = sessionObjectNames(spec).secret;
  return [
    ...Object.entries(spec.env).map(([k, v]) => ({ name: k, value: v })),
    { name: "ADAPTER_PORT", value: String(harnessPort(spec)) },
    { name: "ADAPTER_STREAMING", value: String(spec.streaming) },
    { name: "AGENT_WORKSPACE", value: "/workspace" },
    ...(spec.session ? [{ name: HARNESS_CONTRACT_ENV.name, value: HARNESS_CONTRACT_ENV.value }] : []),
    ...[...credentialNames, "ADAPTER_TOKEN"].map((k) => ({
      name: k,
      valueFrom: { secretKeyRef: { name: secretName, key: k } },
    })),
  ];
}

/**
 * The session's objects. `credentialNames`: the Agent's allowed credentials the pod gets from the
 * Secret (sorted); `secretData`: the Secret's `stringData` (credentials and ADAPTER_TOKEN), absent
 * where the caller supplies it otherwise (the component, as a Pulumi secret).
 */
export function sessionManifests(
  spec: SessionSpec,
  credentialNames: readonly string[],
  secretData?: Record<string, string>,
) {
  const names = sessionObjectNames(spec);
  const namespace = spec.kubernetes.namespace;
  const workspaceImage = spec.kubernetes.workspaceImage;
  const selector = sessionSelector(spec);
  const labels = () => ({ ...selector, [Labels.managedBy]: "agent-sessions" });
  const meta = (name: string) => ({ name, namespace, labels: labels() });
  // The runner waits for the Ready pod and its route itself (runner/kubernetes/driver.ts), with its own
  // deadline and reasons: an `up` that also awaited the rollout would only add its polling, and a
  // recording `up` would sit in that await until its timeout when the pod or Deployment is
  // deleted outside meanwhile, holding every later operation of the session.
  const awaitedByRunner = (name: string) => ({
    ...meta(name),
    annotations: { "pulumi.com/skipAwait": "true" },
  });

  const secret = {
    apiVersion: "v1" as const,
    kind: "Secret" as const,
    metadata: meta(names.secret),
    type: "Opaque",
    ...(secretData ? { stringData: secretData } : {}),
  };

  const pvc = {
    apiVersion: "v1" as const,
    kind: "PersistentVolumeClaim" as const,
    metadata: meta(names.pvc),
    spec: {
      accessModes: ["ReadWriteOnce"],
      resources: { requests: { storage: `${spec.resources.storageMiB}Mi` } },
      ...(spec.kubernetes.storageClassName ? { storageClassName: spec.kubernetes.storageClassName } : {}),
    },
  };

  const env = adapterEnv(spec, credentialNames);

  // The session's skills (issue 39): a ConfigMap of the stack, one key a skill
  // (`<pack>.<skill>.md`: a key holds no `/`, and DNS labels no `.`), projected read-only at
  // /skills/<pack>/<skill>.md, 0444. Absent without skills: such a session's objects are as before.
  const skills = spec.skills ?? [];
  const skillKey = (s: { pack: string; name: string }) => `${s.pack}.${s.name}.md`;
  const configMap =
    skills.length === 0
      ? undefined
      : {
          apiVersion: "v1" as const,
          kind: "ConfigMap" as const,
          metadata: meta(names.skills),
          data: Object.fromEntries(skills.map((s) => [skillKey(s), skillFileContent(s)])),
        };

  const deployment = {
    apiVersion: "apps/v1" as const,
    kind: "Deployment" as const,
    metadata: awaitedByRunner(names.workload),
    spec: {
      replicas: spec.replicas,
      strategy: { type: "Recreate" },
      selector: { matchLabels: selector },
      template: {
        metadata: {
          labels: labels(),
          // With the sidecar, `kubectl exec` without -c still lands in the agent's container.
          ...(workspaceImage
            ? { annotations: { "kubectl.kubernetes.io/default-container": ADAPTER_CONTAINER } }
            : {}),
        },
        spec: {
          ...hardenedPodSpec(),
          containers: [
            {
              name: ADAPTER_CONTAINER,
              image: spec.image,
              imagePullPolicy: "IfNotPresent",
              env,
              ports: [
                { name: "adapter", containerPort: harnessPort(spec), protocol: "TCP" },
                ...declaredPorts(spec).map((p) => ({ name: p.name, containerPort: p.port, protocol: "TCP" })),
              ],
              securityContext: hardenedContainerSecurityContext(),
              resources: {
                requests: { cpu: cpuRequestOf(spec.resources.cpu), memory: `${spec.resources.memoryMiB}Mi` },
                limits: { cpu: spec.resources.cpu, memory: `${spec.resources.memoryMiB}Mi` },
              },
              readinessProbe: {
                httpGet: { path: readyPath(spec), port: harnessPort(spec) },
                periodSeconds: 1,
                failureThreshold: 3,
              },
              livenessProbe: {
                httpGet: { path: "/healthz", port: harnessPort(spec) },
                periodSeconds: 10,
                failureThreshold: 3,
              },
              volumeMounts: [
                { name: "workspace", mountPath: "/workspace" },
                { name: "tmp", mountPath: "/tmp" },
                ...(configMap ? [{ name: SKILLS_VOLUME, mountPath: SKILLS_DIR, readOnly: true }] : []),
              ],
            },
            ...(workspaceImage ? [workspaceSidecar(workspaceImage)] : []),
          ],
          volumes: [
            { name: "workspace", persistentVolumeClaim: { claimName: names.pvc } },
            { name: "tmp", emptyDir: { medium: "Memory", sizeLimit: "64Mi" } },
            ...(workspaceImage ? [{ name: "workspace-scratch", emptyDir: { sizeLimit: "256Mi" } }] : []),
            ...(configMap
              ? [
                  {
                    name: SKILLS_VOLUME,
                    configMap: {
                      name: names.skills,
                      defaultMode: 0o444,
                      items: skills.map((s) => ({ key: skillKey(s), path: skillFilePath(s) })),
                    },
                  },
                ]
              : []),
          ],
        },
      },
    },
  };

  const service = {
    apiVersion: "v1" as const,
    kind: "Service" as const,
    metadata: awaitedByRunner(names.workload),
    spec: {
      type: "ClusterIP",
      selector,
      ports: [
        { name: "adapter", port: ADAPTER_PORT, targetPort: harnessPort(spec), protocol: "TCP" },
        // The session's declared ports (issue 40), on the same numbers: the runner reaches each at
        // the Service's address, as it reaches the adapter.
        ...declaredPorts(spec).map((p) => ({
          name: p.name,
          port: p.port,
          targetPort: p.port,
          protocol: "TCP",
        })),
      ],
    },
  };

  // A podSelector alone selects pods in the policy's own namespace; a runner in another
  // namespace is matched by namespaceSelector AND podSelector in one peer (two peers would admit
  // every pod of those namespaces, or any namespace's pods with the runner's labels).
  const runnerPod = { podSelector: { matchLabels: spec.kubernetes.runnerSelector } };
  const runnerPeers: Record<string, unknown>[] = [
    spec.kubernetes.runnerNamespaceSelector
      ? { namespaceSelector: { matchLabels: spec.kubernetes.runnerNamespaceSelector }, ...runnerPod }
      : runnerPod,
    ...(spec.kubernetes.runnerCidr ? [{ ipBlock: { cidr: spec.kubernetes.runnerCidr } }] : []),
  ];
  const networkPolicy = {
    apiVersion: "networking.k8s.io/v1" as const,
    kind: "NetworkPolicy" as const,
    metadata: meta(names.workload),
    spec: {
      podSelector: { matchLabels: selector },
      policyTypes: ["Ingress", "Egress"],
      // From the runner only: the harness's port and the session's declared ports, nothing else.
      ingress: [
        {
          from: runnerPeers,
          ports: [
            { port: harnessPort(spec), protocol: "TCP" },
            ...declaredPorts(spec).map((p) => ({ port: p.port, protocol: "TCP" })),
          ],
        },
      ],
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
  };

  return { secret, pvc, deployment, service, networkPolicy, ...(configMap ? { configMap } : {}) };
}

export type SessionManifests = ReturnType<typeof sessionManifests>;

/** A HarnessSession's declared ports (spec.ports, issue 40); none for a session without. */
export function declaredPorts(spec: SessionSpec): { port: number; name: string }[] {
  return spec.ports ?? [];
}

/**
 * The objects as the policy pack is shown them in an `up`: the Pulumi type token, the resource's
 * name in the component (`<session>-…`), the inputs (credentials as plain values, as a policy
 * sees a secret's value).
 */
export function sessionResources(spec: SessionSpec, m: SessionManifests) {
  return [
    { type: "kubernetes:core/v1:Secret", name: `${spec.name}-credentials`, props: m.secret },
    { type: "kubernetes:core/v1:PersistentVolumeClaim", name: `${spec.name}-workspace`, props: m.pvc },
    { type: "kubernetes:apps/v1:Deployment", name: `${spec.name}-deployment`, props: m.deployment },
    { type: "kubernetes:core/v1:Service", name: `${spec.name}-service`, props: m.service },
    {
      type: "kubernetes:networking.k8s.io/v1:NetworkPolicy",
      name: `${spec.name}-network-policy`,
      props: m.networkPolicy,
    },
    ...(m.configMap
      ? [{ type: "kubernetes:core/v1:ConfigMap", name: `${spec.name}-skills`, props: m.configMap }]
      : []),
  ];
}
