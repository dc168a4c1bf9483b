/**
 * A Kubernetes session: a PVC (the workspace, survives scale-down), a Secret with the Agent's
 * allowed credentials and the adapter token, a Deployment (replicas 1 or 0, Recreate) whose pod
 * is hardened and mounts nothing but the session volume and a small /tmp, a ClusterIP Service
 * the runner reaches the adapter through, and a NetworkPolicy: ingress only from the runner,
 * egress only to DNS and the Agent's allowed endpoints. The objects themselves are built by
 * infra/kubernetes/manifests.ts, which the runner's fast create shares.
 *
 * "Running" = the Deployment asks for 1 replica; "Ready" = that pod passes /readyz.
 */
import * as k8s from "@pulumi/kubernetes";
import * as pulumi from "@pulumi/pulumi";
import { ADAPTER_PORT } from "../../contracts/adapter.ts";
import type { SessionSpec } from "../../contracts/session-spec.ts";
import { adapterEnv, sessionManifests } from "./manifests.ts";

export { cpuRequestOf } from "./manifests.ts";

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
    // The env aside (it names the credentials, known once the secret config is), every object is
    // the builder's as it stands; the runner's fast create applies the same objects.
    const m = sessionManifests(spec, []);
    const child = { parent: this, ...(args.provider ? { provider: args.provider } : {}) };

    const credentialNames = pulumi.output(args.credentials).apply((c) => Object.keys(c).sort());
    const secret = new k8s.core.v1.Secret(
      `${name}-credentials`,
      {
        ...m.secret,
        stringData: pulumi.secret(
          pulumi
            .all([args.credentials, args.adapterToken])
            .apply(([c, token]) => ({ ...c, ADAPTER_TOKEN: token })),
        ),
      },
      child,
    );

    const pvc = new k8s.core.v1.PersistentVolumeClaim(`${name}-workspace`, m.pvc, {
      ...child,
      protect: false,
    });

    // Declared before the Deployment is rolled: its pod mounts it (issue 39).
    const skills = m.configMap ? new k8s.core.v1.ConfigMap(`${name}-skills`, m.configMap, child) : undefined;

    const pod = m.deployment.spec.template.spec;
    const [adapter, ...sidecars] = pod.containers;
    if (!adapter) throw new Error("the session pod has no adapter container");
    const deployment = new k8s.apps.v1.Deployment(
      `${name}-deployment`,
      {
        ...m.deployment,
        spec: {
          ...m.deployment.spec,
          template: {
            ...m.deployment.spec.template,
            spec: {
              ...pod,
              containers: [
                { ...adapter, env: credentialNames.apply((names) => adapterEnv(spec, names)) },
                ...sidecars,
              ],
            },
          },
        },
      },
      { ...child, dependsOn: [secret, pvc, ...(skills ? [skills] : [])] },
    );

    const service = new k8s.core.v1.Service(`${name}-service`, m.service, child);
    new k8s.networking.v1.NetworkPolicy(`${name}-network-policy`, m.networkPolicy, child);

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
