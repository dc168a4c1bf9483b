/**
 * The hardening of every pod the project declares, written once: the session pods
 * (infra/kubernetes/manifests.ts, which the runner's fast create applies too) and the control
 * plane's server and runner pods (infra/control-plane/control-plane.ts). It is what the policy
 * pack checks of a session (policies/container-policies.ts) and what Pod Security "restricted"
 * admits: non-root uid/gid 65532 (the images' user), seccomp RuntimeDefault, a read-only root file
 * system, no privilege escalation, every capability dropped, no service-account token.
 *
 * Plain objects (fresh on every call, so no two pods share one), no Pulumi SDK: the runner loads
 * this module and never loads the SDK.
 */

/** The uid and gid every pod runs as: the images' non-root user. */
export const NON_ROOT_ID = 65532;

/** The pod-level security context: non-root, seccomp RuntimeDefault; volumes writable by the pod's group. */
export function hardenedPodSecurityContext() {
  return {
    runAsNonRoot: true,
    runAsUser: NON_ROOT_ID,
    runAsGroup: NON_ROOT_ID,
    fsGroup: NON_ROOT_ID,
    seccompProfile: { type: "RuntimeDefault" },
  };
}

/** The security context of every container. */
export function hardenedContainerSecurityContext() {
  return {
    allowPrivilegeEscalation: false,
    privileged: false,
    readOnlyRootFilesystem: true,
    runAsNonRoot: true,
    capabilities: { drop: ["ALL"] },
    seccompProfile: { type: "RuntimeDefault" },
  };
}

/**
 * The pod spec's hardening fields: no Kubernetes credentials (a pod that needs them, the runner's,
 * says so after these), no other Service's address in its environment, the pod security context.
 */
export function hardenedPodSpec() {
  return {
    automountServiceAccountToken: false,
    enableServiceLinks: false,
    securityContext: hardenedPodSecurityContext(),
  };
}
