import type { ResourceValidationPolicy } from "@pulumi/policy";
import { containersOf, validateKinds } from "./judged-resources.ts";

/**
 * What a session container may do to its host: the Kubernetes Pod Security Standards
 * "restricted" profile (kubernetes.io/docs/concepts/security/pod-security-standards), applied to
 * the pod spec and, field for field, to the Docker container our provider creates.
 */

export const noPrivilegedContainers: ResourceValidationPolicy = {
  name: "no-privileged-containers",
  description: "No container runs privileged.",
  validateResource: validateKinds({
    podSpec: (spec, report) => {
      for (const { container, label } of containersOf(spec)) {
        if (container.securityContext?.privileged === true) report(`${label} is privileged`);
      }
    },
    dockerContainer: (container, report) => {
      if (container.privileged === true) report("the container is privileged");
    },
  }),
};

export const noPrivilegeEscalation: ResourceValidationPolicy = {
  name: "no-privilege-escalation",
  description:
    "Every container sets no_new_privs: allowPrivilegeEscalation false (Kubernetes), " +
    'securityOpt "no-new-privileges" (Docker).',
  validateResource: validateKinds({
    podSpec: (spec, report) => {
      for (const { container, label } of containersOf(spec)) {
        // Unset means true in Kubernetes, so only an explicit false passes.
        if (container.securityContext?.allowPrivilegeEscalation !== false) {
          report(`${label} does not set securityContext.allowPrivilegeEscalation: false`);
        }
      }
    },
    dockerContainer: (container, report) => {
      const setting = lastSecurityOpt(container.securityOpt, "no-new-privileges");
      if (setting !== "" && setting !== "true") {
        report(
          'the container\'s securityOpt does not contain "no-new-privileges" (or "no-new-privileges:true")',
        );
      }
    },
  }),
};

export const capabilitiesDropped: ResourceValidationPolicy = {
  name: "capabilities-dropped",
  description: "Every container drops ALL Linux capabilities and adds none.",
  validateResource: validateKinds({
    podSpec: (spec, report) => {
      for (const { container, label } of containersOf(spec)) {
        const { drop = [], add = [] } = container.securityContext?.capabilities ?? {};
        if (!dropsAll(drop)) report(`${label} does not drop ALL capabilities`);
        if (add.length > 0) report(`${label} adds capabilities ${add.join(", ")}`);
      }
    },
    dockerContainer: (container, report) => {
      if (!dropsAll(container.capDrop ?? [])) report("the container's capDrop does not contain ALL");
      const added = container.capAdd ?? [];
      if (added.length > 0) report(`the container adds capabilities ${added.join(", ")}`);
    },
  }),
};

export const runAsNonRoot: ResourceValidationPolicy = {
  name: "run-as-non-root",
  description:
    "Every container runs as a non-root user: runAsNonRoot true and runAsUser not 0 (Kubernetes), " +
    'a numeric non-zero "uid[:gid]" user (Docker).',
  validateResource: validateKinds({
    podSpec: (spec, report) => {
      const pod = spec.securityContext;
      for (const { container, label } of containersOf(spec)) {
        const own = container.securityContext;
        if ((own?.runAsNonRoot ?? pod?.runAsNonRoot) !== true) {
          report(`${label} does not set runAsNonRoot: true (on the container or the pod)`);
        }
        if ((own?.runAsUser ?? pod?.runAsUser) === 0) report(`${label} runs as user 0 (root)`);
      }
    },
    dockerContainer: (container, report) => {
      // Like the kubelet with runAsNonRoot, only a numeric uid can be verified: a user name
      // resolves through the image's /etc/passwd, where any name may be uid 0.
      const user = container.user?.trim() ?? "";
      const uid = /^(\d+)(?::\d+)?$/.exec(user)?.[1];
      if (uid === undefined || Number(uid) === 0) {
        report(`the container's user "${user}" is not a numeric non-root uid[:gid]`);
      }
    },
  }),
};

export const readOnlyRootFilesystem: ResourceValidationPolicy = {
  name: "read-only-root-filesystem",
  description: "Every container's root filesystem is read-only; writes go to the session volume or a tmpfs.",
  validateResource: validateKinds({
    podSpec: (spec, report) => {
      for (const { container, label } of containersOf(spec)) {
        if (container.securityContext?.readOnlyRootFilesystem !== true) {
          report(`${label} does not set securityContext.readOnlyRootFilesystem: true`);
        }
      }
    },
    dockerContainer: (container, report) => {
      if (container.readOnlyRootfs !== true) report("the container does not set readOnlyRootfs: true");
    },
  }),
};

export const seccompRuntimeDefault: ResourceValidationPolicy = {
  name: "seccomp-runtime-default",
  description:
    "Every container runs under the runtime's default seccomp profile: seccompProfile.type " +
    "RuntimeDefault on the pod or container (Kubernetes), no seccomp override in securityOpt (Docker).",
  validateResource: validateKinds({
    podSpec: (spec, report) => {
      const podProfile = spec.securityContext?.seccompProfile?.type;
      for (const { container, label } of containersOf(spec)) {
        const profile = container.securityContext?.seccompProfile?.type ?? podProfile;
        if (profile !== "RuntimeDefault") {
          report(`${label} seccomp profile is ${profile ?? "unset (Unconfined)"}, not RuntimeDefault`);
        }
      }
    },
    dockerContainer: (container, report) => {
      const profile = lastSecurityOpt(container.securityOpt, "seccomp");
      if (profile !== undefined) {
        report(`the container overrides the engine's default seccomp profile with "${profile}"`);
      }
    },
  }),
};

function dropsAll(drop: readonly string[]): boolean {
  // containerd and runc treat the capability name "ALL" case-insensitively.
  return drop.some((capability) => capability.toUpperCase() === "ALL");
}

/**
 * The value of the last `key` entry in a Docker securityOpt list, as the daemon reads it
 * (`key=value`, legacy `key:value`, or a bare `key` meaning ""); undefined when absent.
 */
export function lastSecurityOpt(securityOpt: readonly string[] | undefined, key: string): string | undefined {
  let value: string | undefined;
  for (const entry of securityOpt ?? []) {
    const separator = /[=:]/.exec(entry);
    const entryKey = separator ? entry.slice(0, separator.index) : entry;
    if (entryKey === key) value = separator ? entry.slice(separator.index + 1) : "";
  }
  return value;
}
