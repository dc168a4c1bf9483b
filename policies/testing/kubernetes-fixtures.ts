import type * as k8s from "@pulumi/kubernetes";
import type { Unwrap } from "@pulumi/pulumi";
import type {
  Container,
  NetworkPolicy,
  PersistentVolumeClaim,
  PodSpec,
  Secret,
  Service,
} from "../judged-resources.ts";
import type { FakeResource } from "./policy-harness.ts";

/**
 * A compliant Kubernetes session, the shape infra/ declares: PVC, Deployment, ClusterIP Service,
 * NetworkPolicy, credentials Secret. Each builder returns a fresh copy and takes an optional
 * change, so a test states the one thing it breaks (awsguard's getHappyPathArgs pattern).
 */

export type Deployment = Unwrap<k8s.apps.v1.DeploymentArgs>;
export type Pod = Unwrap<k8s.core.v1.PodArgs>;

export const NAMESPACE = "agent-sessions";
export const SESSION_IMAGE = `127.0.0.1:5000/agent-sessions/reference@sha256:${"0123456789abcdef".repeat(4)}`;
export const POD_LABELS = { "agent-sessions.dev/session": "demo" };
const CLAIM_NAME = "demo-workspace";

export function agentContainer(): Container {
  return {
    name: "agent",
    image: SESSION_IMAGE,
    env: [
      { name: "LOG_LEVEL", value: "info" },
      {
        name: "OPENAI_API_KEY",
        valueFrom: { secretKeyRef: { name: "demo-credentials", key: "OPENAI_API_KEY" } },
      },
    ],
    ports: [{ name: "adapter", containerPort: 8080 }],
    resources: { requests: { cpu: "250m", memory: "256Mi" }, limits: { cpu: "1", memory: "1Gi" } },
    securityContext: {
      privileged: false,
      allowPrivilegeEscalation: false,
      readOnlyRootFilesystem: true,
      runAsUser: 10001,
      capabilities: { drop: ["ALL"] },
    },
    volumeMounts: [
      { name: "workspace", mountPath: "/workspace" },
      { name: "tmp", mountPath: "/tmp" },
    ],
  };
}

/** Non-root and seccomp are set once for the pod, the way the restricted profile allows. */
export function sessionPodSpec(): PodSpec {
  return {
    automountServiceAccountToken: false,
    securityContext: { runAsNonRoot: true, seccompProfile: { type: "RuntimeDefault" } },
    initContainers: [{ ...agentContainer(), name: "prepare-workspace", env: [], ports: [] }],
    containers: [agentContainer()],
    volumes: [
      { name: "workspace", persistentVolumeClaim: { claimName: CLAIM_NAME } },
      { name: "tmp", emptyDir: { medium: "Memory", sizeLimit: "64Mi" } },
    ],
  };
}

/** The first app container of a pod spec (the agent). */
export function agent(pod: PodSpec): Container {
  return pod.containers[0]!;
}

export function deployment(change?: (pod: PodSpec, deployment: Deployment) => void): FakeResource {
  const props: Deployment = {
    apiVersion: "apps/v1",
    kind: "Deployment",
    metadata: { name: "demo", namespace: NAMESPACE },
    spec: {
      replicas: 1,
      selector: { matchLabels: { ...POD_LABELS } },
      template: { metadata: { labels: { ...POD_LABELS } }, spec: sessionPodSpec() },
    },
  };
  change?.(props.spec.template.spec!, props);
  return { type: "kubernetes:apps/v1:Deployment", name: "demo", props };
}

export function pod(change?: (pod: PodSpec, whole: Pod) => void): FakeResource {
  const props: Pod = {
    apiVersion: "v1",
    kind: "Pod",
    metadata: { name: "demo", namespace: NAMESPACE, labels: { ...POD_LABELS } },
    spec: sessionPodSpec(),
  };
  change?.(props.spec!, props);
  return { type: "kubernetes:core/v1:Pod", name: "demo", props };
}

export function persistentVolumeClaim(change?: (claim: PersistentVolumeClaim) => void): FakeResource {
  const props: PersistentVolumeClaim = {
    metadata: { name: CLAIM_NAME, namespace: NAMESPACE },
    spec: { accessModes: ["ReadWriteOnce"], resources: { requests: { storage: "1Gi" } } },
  };
  change?.(props);
  return { type: "kubernetes:core/v1:PersistentVolumeClaim", name: "demo-workspace", props };
}

export function service(change?: (service: Service) => void): FakeResource {
  const props: Service = {
    metadata: { name: "demo", namespace: NAMESPACE },
    spec: {
      type: "ClusterIP",
      selector: { ...POD_LABELS },
      ports: [{ name: "adapter", port: 8080, targetPort: 8080 }],
    },
  };
  change?.(props);
  return { type: "kubernetes:core/v1:Service", name: "demo", props };
}

export function secret(change?: (secret: Secret) => void): FakeResource {
  const props: Secret = {
    metadata: { name: "demo-credentials", namespace: NAMESPACE },
    type: "Opaque",
    stringData: { OPENAI_API_KEY: "sk-test" },
  };
  change?.(props);
  return { type: "kubernetes:core/v1:Secret", name: "demo-credentials", props };
}

/**
 * Ingress only from the runner; egress only to cluster DNS and to the model endpoint on 443.
 */
export function networkPolicy(change?: (policy: NetworkPolicy) => void): FakeResource {
  const props: NetworkPolicy = {
    metadata: { name: "demo", namespace: NAMESPACE },
    spec: {
      podSelector: { matchLabels: { ...POD_LABELS } },
      policyTypes: ["Ingress", "Egress"],
      ingress: [
        {
          from: [{ podSelector: { matchLabels: { "agent-sessions.dev/role": "runner" } } }],
          ports: [{ protocol: "TCP", port: 8080 }],
        },
      ],
      egress: [
        {
          to: [
            {
              namespaceSelector: { matchLabels: { "kubernetes.io/metadata.name": "kube-system" } },
              podSelector: { matchLabels: { "k8s-app": "kube-dns" } },
            },
          ],
          ports: [
            { protocol: "UDP", port: 53 },
            { protocol: "TCP", port: 53 },
          ],
        },
        {
          to: [{ ipBlock: { cidr: "0.0.0.0/0", except: ["10.0.0.0/8", "169.254.0.0/16"] } }],
          ports: [{ protocol: "TCP", port: 443 }],
        },
      ],
    },
  };
  change?.(props);
  return { type: "kubernetes:networking.k8s.io/v1:NetworkPolicy", name: "demo", props };
}

/** The whole compliant session stack. */
export function kubernetesSession(): FakeResource[] {
  return [persistentVolumeClaim(), secret(), deployment(), service(), networkPolicy()];
}
