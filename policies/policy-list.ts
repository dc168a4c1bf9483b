import type { Policies } from "@pulumi/policy";
import {
  capabilitiesDropped,
  noPrivilegedContainers,
  noPrivilegeEscalation,
  readOnlyRootFilesystem,
  runAsNonRoot,
  seccompRuntimeDefault,
} from "./container-policies.ts";
import { noLiteralCredentialsInEnv, resourceLimitsSet } from "./container-provisioning-policies.ts";
import { imageFromApprovedRegistry, imagePinnedByDigest } from "./image-policies.ts";
import { narrowedMounts, noHostNamespaces, noServiceAccountToken } from "./isolation-policies.ts";
import {
  dockerInternalNetwork,
  egressExcludesControlPlanePorts,
  ingressFromScopedPeers,
  networkPolicySelectsEverySessionPod,
  serviceClusterIpOnly,
  sessionPortsDeclared,
} from "./network-isolation-policies.ts";
import { dockerContainerOnStackNetwork, mountsOnlyStackVolumes } from "./stack-policies.ts";

/**
 * Every policy of the agent-sessions pack (the security invariants: docs/security.md, policies/README.md), in one explicit list.
 * Importing this module has no side effects: the pack itself (which starts a gRPC server) is
 * constructed only in index.ts, so tests call these policies directly.
 */
export const policies: Policies = [
  imagePinnedByDigest,
  imageFromApprovedRegistry,
  noServiceAccountToken,
  noHostNamespaces,
  noPrivilegedContainers,
  noPrivilegeEscalation,
  capabilitiesDropped,
  runAsNonRoot,
  readOnlyRootFilesystem,
  seccompRuntimeDefault,
  narrowedMounts,
  noLiteralCredentialsInEnv,
  resourceLimitsSet,
  serviceClusterIpOnly,
  egressExcludesControlPlanePorts,
  ingressFromScopedPeers,
  sessionPortsDeclared,
  dockerInternalNetwork,
  networkPolicySelectsEverySessionPod,
  dockerContainerOnStackNetwork,
  mountsOnlyStackVolumes,
];
