/**
 * The Kubernetes fast create: a session's first objects made at once through the API, exactly the
 * ones its stack's program declares (infra/kubernetes/manifests.ts, the builder the component
 * uses), after the policy pack has judged them in process under the config an `up` would give it
 * (policies/judge.ts through StackManager.judge). The caller (runner/kubernetes/driver.ts) waits for the
 * pod and its Service, answers, and has the stack record the create with an `up` in the
 * background: the Kubernetes provider in server-side-apply mode upserts, so that `up` adopts the
 * objects as they are (same values, nothing to roll).
 *
 * The objects are applied server-side under the runner's field manager; once the recording `up`
 * has applied them under the provider's own manager, `releaseRunnerFields` drops the runner's
 * claim, so the stack alone owns them again (a later `up` changing `spec.replicas` would
 * otherwise meet a conflict with the runner's claim on the old value: HTTP 409).
 *
 * A refusal by the pack is the `up`'s refusal (PolicyViolationError, nothing made, no stack);
 * another pack attached beside ours (it cannot be run in process) declines: the full path goes.
 */
import { PatchStrategy, setHeaderOptions } from "@kubernetes/client-node";
import type { SessionSpec } from "../../contracts/session-spec.ts";
import { sessionManifests, sessionObjectNames, sessionResources } from "../../infra/kubernetes/manifests.ts";
import { PolicyViolationError, type StackManager } from "../../stacks/index.ts";
import type { DriverLog, Secrets } from "../engine/fast-path.ts";
import { isApiStatus } from "./pod-watch.ts";
import { RUNNER_FIELD_MANAGER, type SessionApis } from "./scale.ts";

/** The session's objects with this runner's credentials in its Secret. */
export function fastCreateManifests(spec: SessionSpec, secrets: Secrets) {
  const names = Object.keys(secrets.credentials).sort();
  return sessionManifests(spec, names, { ...secrets.credentials, ADAPTER_TOKEN: secrets.adapterToken });
}

/**
 * Judges, then applies the session's objects (Secret, PVC, Service and NetworkPolicy first, so the
 * pod never starts without its policy, volume or credentials; then the Deployment). Undefined: the
 * pack cannot be judged in process, take the full path. Throws PolicyViolationError on a refusal,
 * before anything is made.
 */
export async function fastCreateKubernetes(
  apis: SessionApis,
  stacks: Pick<StackManager, "judge" | "stackName">,
  spec: SessionSpec,
  secrets: Secrets,
  log: DriverLog,
): Promise<true | undefined> {
  const m = fastCreateManifests(spec, secrets);
  const violations = await stacks.judge(spec, sessionResources(spec, m));
  if (violations === undefined) {
    log("info", "fast create declined: the attached policy packs cannot be judged in process");
    return undefined;
  }
  if (violations.length > 0)
    throw new PolicyViolationError(stacks.stackName(spec.namespace, spec.name), violations);
  const namespace = spec.kubernetes.namespace;
  const apply = { fieldManager: RUNNER_FIELD_MANAGER, force: true };
  const ssa = setHeaderOptions("Content-Type", PatchStrategy.ServerSideApply);
  const { secret, pvc, service, networkPolicy, deployment, configMap } = m;
  await Promise.all([
    ...(configMap
      ? [
          apis.core.patchNamespacedConfigMap(
            { name: configMap.metadata.name, namespace, body: configMap, ...apply },
            ssa,
          ),
        ]
      : []),
    apis.core.patchNamespacedSecret({ name: secret.metadata.name, namespace, body: secret, ...apply }, ssa),
    apis.core.patchNamespacedPersistentVolumeClaim(
      { name: pvc.metadata.name, namespace, body: pvc, ...apply },
      ssa,
    ),
    apis.core.patchNamespacedService(
      { name: service.metadata.name, namespace, body: service, ...apply },
      ssa,
    ),
    apis.networking.patchNamespacedNetworkPolicy(
      { name: networkPolicy.metadata.name, namespace, body: networkPolicy, ...apply },
      ssa,
    ),
  ]);
  await apis.apps.patchNamespacedDeployment(
    { name: deployment.metadata.name, namespace, body: deployment, ...apply },
    ssa,
  );
  return true;
}

type Managed = { metadata?: { resourceVersion?: string; managedFields?: { manager?: string }[] } };

/**
 * Drops the runner's field manager (its server-side apply of a fast create, its merge patches of
 * `spec.replicas` in a fast stop or resume) from every object of the session, once the stack's
 * `up` has applied the same values under its own: the stack is then the objects' only owner.
 * Writing `metadata.managedFields` changes no field, so it is recorded under no manager.
 */
export async function releaseRunnerFields(
  apis: SessionApis,
  namespace: string,
  spec: Pick<SessionSpec, "namespace" | "name">,
): Promise<void> {
  const n = sessionObjectNames(spec);
  const merge = setHeaderOptions("Content-Type", PatchStrategy.MergePatch);
  type Ops = { read: () => Promise<Managed>; patch: (body: object) => Promise<unknown> };
  const objects: Ops[] = [
    {
      read: () => apis.apps.readNamespacedDeployment({ name: n.workload, namespace }),
      patch: (body) => apis.apps.patchNamespacedDeployment({ name: n.workload, namespace, body }, merge),
    },
    {
      read: () => apis.core.readNamespacedService({ name: n.workload, namespace }),
      patch: (body) => apis.core.patchNamespacedService({ name: n.workload, namespace, body }, merge),
    },
    {
      read: () => apis.networking.readNamespacedNetworkPolicy({ name: n.workload, namespace }),
      patch: (body) =>
        apis.networking.patchNamespacedNetworkPolicy({ name: n.workload, namespace, body }, merge),
    },
    {
      read: () => apis.core.readNamespacedSecret({ name: n.secret, namespace }),
      patch: (body) => apis.core.patchNamespacedSecret({ name: n.secret, namespace, body }, merge),
    },
    {
      read: () => apis.core.readNamespacedPersistentVolumeClaim({ name: n.pvc, namespace }),
      patch: (body) =>
        apis.core.patchNamespacedPersistentVolumeClaim({ name: n.pvc, namespace, body }, merge),
    },
  ];
  await Promise.all(objects.map((o) => release(o.read, o.patch)));
}

async function release(
  read: () => Promise<Managed>,
  patch: (body: object) => Promise<unknown>,
): Promise<void> {
  for (let attempt = 0; ; attempt++) {
    let object: Managed;
    try {
      object = await read();
    } catch (e) {
      if (isApiStatus(e, 404)) return;
      throw e;
    }
    const managed = object.metadata?.managedFields ?? [];
    const kept = managed.filter((f) => f.manager !== RUNNER_FIELD_MANAGER);
    // Nothing of ours, or ours alone (an empty list would leave managedFields as it is).
    if (kept.length === managed.length || kept.length === 0) return;
    try {
      // The resourceVersion makes a concurrent write (a controller's status) a 409: read again.
      await patch({ metadata: { resourceVersion: object.metadata?.resourceVersion, managedFields: kept } });
      return;
    } catch (e) {
      if (!isApiStatus(e, 409) || attempt >= 4) throw e;
    }
  }
}
