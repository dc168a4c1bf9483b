/**
 * What the runner may do on the cluster: one Role in the sessions namespace, nothing cluster-wide,
 * nothing in the control plane's own namespace. Each rule says which part of the runner needs it.
 * The runner's service account is the only Kubernetes credential in the system (session pods and
 * the server mount none).
 */
import type * as k8s from "@pulumi/kubernetes";

type PolicyRule = k8s.types.input.rbac.v1.PolicyRule;

/** Everything the session program (infra/kubernetes/session.ts) declares, through the Kubernetes provider. */
const MANAGE = ["get", "list", "watch", "create", "update", "patch", "delete"];
const READ = ["get", "list", "watch"];

/** The rules of the runner's Role in `sessionsNamespace`. */
export function runnerRules(sessionsNamespace: string): PolicyRule[] {
  return [
    // The session stack's objects (Pulumi creates, server-side-applies, scales and destroys them).
    // ConfigMaps: a session's skills (issue 39).
    {
      apiGroups: [""],
      resources: ["persistentvolumeclaims", "services", "secrets", "configmaps"],
      verbs: MANAGE,
    },
    { apiGroups: ["apps"], resources: ["deployments"], verbs: MANAGE },
    { apiGroups: ["networking.k8s.io"], resources: ["networkpolicies"], verbs: MANAGE },
    // The driver lists and watches session pods (readiness, exits). The provider's await logic
    // reads the pods, ReplicaSets and Endpoints behind a Deployment and a Service: without the
    // last two an `up` never returns (measured: the Deployment Ready, the update still waiting
    // minutes later). Events are not needed.
    { apiGroups: [""], resources: ["endpoints"], verbs: READ },
    // Snapshots (runner/kubernetes/snapshots.ts) copy in a short-lived pod the runner makes and
    // deletes itself; their PVCs and the copy pods' NetworkPolicy fall under the rules above.
    { apiGroups: [""], resources: ["pods"], verbs: [...READ, "create", "delete"] },
    { apiGroups: ["apps"], resources: ["replicasets"], verbs: READ },
    // The agent runs over a long-lived exec stream. Older clusters (1.20 here, measured) authorize
    // an exec over WebSocket (what @kubernetes/client-node speaks) as `get`; SPDY, and WebSocket on
    // newer releases, as `create`.
    { apiGroups: [""], resources: ["pods/exec"], verbs: ["get", "create"] },
    // The driver checks its namespace exists before a session (runner/kubernetes/driver.ts); a Role in a
    // namespace can grant reading that namespace object itself, so this needs no ClusterRole.
    { apiGroups: [""], resources: ["namespaces"], resourceNames: [sessionsNamespace], verbs: ["get"] },
  ];
}
