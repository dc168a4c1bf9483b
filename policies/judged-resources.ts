import type { ReportViolation, ResourceValidation, ResourceValidationArgs } from "@pulumi/policy";
import type * as k8s from "@pulumi/kubernetes";
import type { Unwrap } from "@pulumi/pulumi";
import { type ContainerInputs, DockerTypes, type NetworkInputs } from "../infra/docker/provider/schema.ts";

/**
 * The resources the pack judges, read with the types their SDKs publish. Kubernetes kinds are
 * recognised by their Pulumi type tokens (what `isType` compares for a @pulumi/kubernetes class)
 * and typed as those classes' inputs — types only: the pack never loads @pulumi/kubernetes at run
 * time (it took ~1 s of every `up` and `preview`, Docker stacks included); the Docker kinds through
 * the tokens and input shapes of our own provider (infra/docker/provider/schema.ts).
 */

export type ObjectMeta = Unwrap<k8s.types.input.meta.v1.ObjectMeta>;
export type PodSpec = Unwrap<k8s.types.input.core.v1.PodSpec>;
export type Container = Unwrap<k8s.types.input.core.v1.Container>;
export type PersistentVolumeClaim = Unwrap<k8s.core.v1.PersistentVolumeClaimArgs>;
export type Service = Unwrap<k8s.core.v1.ServiceArgs>;
export type Secret = Unwrap<k8s.core.v1.SecretArgs>;
export type NetworkPolicy = Unwrap<k8s.networking.v1.NetworkPolicyArgs>;
/** Read as partial: a field the program left out must fail a check, not crash it. */
export type DockerContainer = Partial<ContainerInputs>;
/** A host endpoint the provider opens through the network's gateway. */
export type DockerNetworkEgress = NetworkInputs["allowedEgress"][number];
export type DockerNetwork = Partial<NetworkInputs>;

/** Every resource kind a policy can judge, and the props it is handed. */
export interface JudgedKinds {
  /** The pod spec of a Pod or of any workload's pod template (see podTemplateOf). */
  podSpec: PodSpec;
  persistentVolumeClaim: PersistentVolumeClaim;
  service: Service;
  secret: Secret;
  networkPolicy: NetworkPolicy;
  dockerContainer: DockerContainer;
  dockerNetwork: DockerNetwork;
}

export type KindCheck<K extends keyof JudgedKinds> = (
  resource: JudgedKinds[K],
  report: ReportViolation,
  args: ResourceValidationArgs,
) => void;

export type KindChecks = { [K in keyof JudgedKinds]?: KindCheck<K> };

/**
 * What a resource under validation (`ResourceValidationArgs`) and a resource of the stack
 * (`PolicyResource`) both offer, so resource and stack policies read kinds the same way.
 */
export type JudgedResource = Pick<ResourceValidationArgs, "type" | "props" | "isType">;

/** A Kubernetes kind: its Pulumi type token, typed with the inputs @pulumi/kubernetes declares for it. */
export type KubeKind<TArgs> = { readonly type: string; readonly __args?: TArgs };
const kind = <TArgs>(type: string): KubeKind<TArgs> => ({ type });

/** The Kubernetes kinds the pack reads (kubernetes-kinds.test.ts checks each token against the SDK's class). */
export const KubeKinds = {
  Pod: kind<k8s.core.v1.PodArgs>("kubernetes:core/v1:Pod"),
  PersistentVolumeClaim: kind<k8s.core.v1.PersistentVolumeClaimArgs>(
    "kubernetes:core/v1:PersistentVolumeClaim",
  ),
  Service: kind<k8s.core.v1.ServiceArgs>("kubernetes:core/v1:Service"),
  Secret: kind<k8s.core.v1.SecretArgs>("kubernetes:core/v1:Secret"),
  ConfigMap: kind<k8s.core.v1.ConfigMapArgs>("kubernetes:core/v1:ConfigMap"),
  NetworkPolicy: kind<k8s.networking.v1.NetworkPolicyArgs>("kubernetes:networking.k8s.io/v1:NetworkPolicy"),
  Deployment: kind<k8s.apps.v1.DeploymentArgs>("kubernetes:apps/v1:Deployment"),
  StatefulSet: kind<k8s.apps.v1.StatefulSetArgs>("kubernetes:apps/v1:StatefulSet"),
  DaemonSet: kind<k8s.apps.v1.DaemonSetArgs>("kubernetes:apps/v1:DaemonSet"),
  ReplicaSet: kind<k8s.apps.v1.ReplicaSetArgs>("kubernetes:apps/v1:ReplicaSet"),
  Job: kind<k8s.batch.v1.JobArgs>("kubernetes:batch/v1:Job"),
  CronJob: kind<k8s.batch.v1.CronJobArgs>("kubernetes:batch/v1:CronJob"),
} as const;

/**
 * The props of `resource` typed as the inputs of `kind`, when it is of that kind. Stack
 * policies see outputs, which for Kubernetes objects keep the shape of the inputs.
 */
export function propsOf<TArgs>(
  resource: JudgedResource,
  kind: KubeKind<TArgs>,
): Unwrap<NonNullable<TArgs>> | undefined {
  return resource.type === kind.type ? (resource.props as Unwrap<NonNullable<TArgs>>) : undefined;
}

type Reader<K extends keyof JudgedKinds> = (resource: JudgedResource) => JudgedKinds[K] | undefined;

const readers: { [K in keyof JudgedKinds]: Reader<K> } = {
  podSpec: (resource) => podTemplateOf(resource)?.spec,
  persistentVolumeClaim: (resource) => propsOf(resource, KubeKinds.PersistentVolumeClaim),
  service: (resource) => propsOf(resource, KubeKinds.Service),
  secret: (resource) => propsOf(resource, KubeKinds.Secret),
  networkPolicy: (resource) => propsOf(resource, KubeKinds.NetworkPolicy),
  dockerContainer: (resource) => (resource.type === DockerTypes.container ? resource.props : undefined),
  dockerNetwork: (resource) => (resource.type === DockerTypes.network ? resource.props : undefined),
};

function runCheck<K extends keyof JudgedKinds>(
  kind: K,
  check: KindCheck<K>,
  args: ResourceValidationArgs,
  report: ReportViolation,
): boolean {
  const resource = readers[kind](args);
  if (resource === undefined) return false;
  check(resource, report, args);
  return true;
}

/**
 * One `validateResource` for a policy that judges several kinds (one invariant, both engines):
 * runs the check for the kind `args` is, or marks the policy not applicable.
 */
export function validateKinds(checks: KindChecks): ResourceValidation {
  const kinds = Object.keys(checks) as (keyof JudgedKinds)[];
  return (args, report) => {
    for (const kind of kinds) {
      const check = checks[kind] as KindCheck<typeof kind> | undefined;
      if (check && runCheck(kind, check, args, report)) return;
    }
    args.notApplicable(`applies only to ${kinds.join(", ")}`);
  };
}

/** A pod template, or a Pod read as one. */
export interface PodTemplate {
  metadata?: ObjectMeta;
  spec?: PodSpec;
}

/**
 * The pod (template) of every pod-bearing Kubernetes kind. All of them, not only the Deployment
 * the session program makes: a pod spec left unjudged in any kind would bypass every workload
 * invariant.
 */
export function podTemplateOf(resource: JudgedResource): PodTemplate | undefined {
  const pod = propsOf(resource, KubeKinds.Pod);
  if (pod !== undefined) return { metadata: pod.metadata, spec: pod.spec };
  return (
    propsOf(resource, KubeKinds.Deployment)?.spec?.template ??
    propsOf(resource, KubeKinds.StatefulSet)?.spec?.template ??
    propsOf(resource, KubeKinds.DaemonSet)?.spec?.template ??
    propsOf(resource, KubeKinds.ReplicaSet)?.spec?.template ??
    propsOf(resource, KubeKinds.Job)?.spec?.template ??
    propsOf(resource, KubeKinds.CronJob)?.spec?.jobTemplate?.spec?.template
  );
}

/** The namespace of a namespaced Kubernetes object; unset means the default namespace. */
export function namespaceOf(resource: JudgedResource): string {
  const metadata = (resource.props as { metadata?: ObjectMeta }).metadata;
  return metadata?.namespace ?? "default";
}

/** A container of a pod spec with a label for messages, e.g. `initContainer "setup"`. */
export interface PodContainer {
  container: Container;
  label: string;
}

/** Containers, init containers and ephemeral containers alike: each runs in the pod. */
export function containersOf(spec: PodSpec): PodContainer[] {
  const groups = [
    ["container", spec.containers],
    ["initContainer", spec.initContainers],
    ["ephemeralContainer", spec.ephemeralContainers],
  ] as const;
  return groups.flatMap(([kind, list]) =>
    (list ?? []).map((container) => ({ container, label: `${kind} "${container.name}"` })),
  );
}
