import { posix } from "node:path";
import type { ResourceValidationPolicy } from "@pulumi/policy";
import { SKILLS_VOLUME } from "../contracts/skill-pack.ts";
import { SKILLS_TARGET, skillsVolumeName } from "../infra/docker/provider/session-skills.ts";
import { containersOf, validateKinds } from "./judged-resources.ts";

/**
 * What a session can reach of its host and cluster from inside: no Kubernetes API credentials,
 * no host namespaces, no storage but its own volume and scratch space. What it can reach over
 * the network is judged in network-isolation-policies.ts.
 */

/** Pod volume sources a session may use: its session volume (a PVC) and scratch space. */
const ALLOWED_POD_VOLUME_SOURCES: readonly string[] = ["persistentVolumeClaim", "emptyDir"];

/** Engine API sockets: a container holding one controls the engine, i.e. the host. */
const ENGINE_SOCKET = /(^|\/)(docker|containerd|podman|crio|cri-dockerd)\.sock$/;

export const noServiceAccountToken: ResourceValidationPolicy = {
  name: "no-service-account-token",
  description:
    "No Kubernetes API credentials reach a session: pods set automountServiceAccountToken: false, " +
    "and no Secret of type kubernetes.io/service-account-token is created.",
  validateResource: validateKinds({
    podSpec: (spec, report) => {
      if (spec.automountServiceAccountToken !== false) {
        report("the pod does not set automountServiceAccountToken: false");
      }
    },
    secret: (secret, report) => {
      if (secret.type === "kubernetes.io/service-account-token") {
        report("the Secret is a long-lived service account token");
      }
    },
  }),
};

export const noHostNamespaces: ResourceValidationPolicy = {
  name: "no-host-namespaces",
  description:
    "No session shares the host's network, PID or IPC namespace (hostNetwork/hostPID/hostIPC, " +
    'hostPort; Docker networkMode/pidMode/ipcMode "host").',
  validateResource: validateKinds({
    podSpec: (spec, report) => {
      for (const field of ["hostNetwork", "hostPID", "hostIPC"] as const) {
        if (spec[field] === true) report(`the pod sets ${field}: true`);
      }
      for (const { container, label } of containersOf(spec)) {
        for (const port of container.ports ?? []) {
          if (port.hostPort !== undefined && port.hostPort !== 0) {
            report(`${label} binds host port ${port.hostPort}`);
          }
        }
      }
    },
    dockerContainer: (container, report) => {
      for (const field of ["networkMode", "pidMode", "ipcMode"] as const) {
        if (container[field] === "host") report(`the container sets ${field}: host`);
      }
    },
  }),
};

export const narrowedMounts: ResourceValidationPolicy = {
  name: "narrowed-mounts",
  description:
    "A session mounts nothing but its own volume and scratch space: pod volumes are " +
    "persistentVolumeClaim or emptyDir (never hostPath), a PVC does not bind or clone an existing " +
    "volume, Docker mounts are volume or tmpfs (never bind) and never an engine socket. The one " +
    "exception is the session's skills (issue 39), read-only at /skills and nowhere else: a " +
    "configMap volume named skills with defaultMode 0444 (Kubernetes), the container's own " +
    "<name>-skills volume (Docker).",
  validateResource: validateKinds({
    podSpec: (spec, report) => {
      checkSkillsVolume(spec, report);
      for (const volume of spec.volumes ?? []) {
        if (volume.name === SKILLS_VOLUME && volume.configMap !== undefined) continue;
        const sources = Object.entries(volume)
          .filter(([key, value]) => key !== "name" && value !== undefined && value !== null)
          .map(([key]) => key);
        const disallowed = sources.filter((source) => !ALLOWED_POD_VOLUME_SOURCES.includes(source));
        if (disallowed.length > 0) {
          report(
            `volume "${volume.name}" uses ${disallowed.join(", ")}; only ${ALLOWED_POD_VOLUME_SOURCES.join(" or ")}`,
          );
        } else if (sources.length === 0) {
          report(`volume "${volume.name}" names no source`);
        }
      }
    },
    persistentVolumeClaim: (claim, report) => {
      // Each of these attaches data that exists already (a named or selected PV, possibly a
      // hostPath one, or a clone of another claim) instead of a fresh, dynamically provisioned volume.
      for (const field of ["volumeName", "selector", "dataSource", "dataSourceRef"] as const) {
        if (claim.spec?.[field] !== undefined) report(`the claim sets spec.${field}`);
      }
    },
    dockerContainer: (container, report) => {
      const skillsVolume = skillsVolumeName(container.name ?? "");
      for (const mount of container.mounts ?? []) {
        const atSkills = underSkills(mount.target);
        if (atSkills || mount.source === skillsVolume) {
          if (
            !atSkills ||
            normalizePath(mount.target) !== SKILLS_TARGET ||
            mount.type !== "volume" ||
            mount.source !== skillsVolume ||
            mount.readOnly !== true
          )
            report(
              `the mount at ${mount.target} is not the session's skills mount (volume ${skillsVolume}, read-only, at ${SKILLS_TARGET})`,
            );
          continue;
        }
        if (mount.type !== "volume" && mount.type !== "tmpfs") {
          report(`the mount at ${mount.target} is of type ${mount.type}; only volume or tmpfs`);
        }
        for (const path of [mount.source, mount.target]) {
          if (path !== undefined && ENGINE_SOCKET.test(normalizePath(path))) {
            report(`the mount at ${mount.target} exposes the engine socket ${path}`);
          }
        }
      }
    },
  }),
};

function underSkills(target: string): boolean {
  const path = normalizePath(target);
  return path === SKILLS_TARGET || path.startsWith(`${SKILLS_TARGET}/`);
}

/**
 * The skills volume of a pod, when it has one: a configMap (nothing else under that name, and no
 * configMap under another), every file 0444 (defaultMode, no item's mode wider), mounted by a
 * container only read-only at /skills, and nothing else mounted under /skills.
 */
function checkSkillsVolume(
  spec: {
    volumes?: { name: string; configMap?: unknown }[];
    containers?: unknown[];
    initContainers?: unknown[];
  },
  report: (message: string) => void,
): void {
  for (const volume of spec.volumes ?? []) {
    const configMap = volume.configMap as { defaultMode?: number; items?: { mode?: number }[] } | undefined;
    if (configMap === undefined) continue;
    if (volume.name !== SKILLS_VOLUME) {
      report(`volume "${volume.name}" uses configMap; only the skills volume may`);
      continue;
    }
    const sources = Object.keys(volume).filter((k) => k !== "name" && k !== "configMap");
    if (sources.length > 0) report(`volume "${volume.name}" names more than a configMap`);
    if (configMap.defaultMode !== 0o444) report(`the skills volume's defaultMode is not 0444`);
    if ((configMap.items ?? []).some((item) => item.mode !== undefined && item.mode !== 0o444))
      report(`an item of the skills volume has a mode other than 0444`);
  }
  const containers = [...(spec.containers ?? []), ...(spec.initContainers ?? [])] as {
    name?: string;
    volumeMounts?: { name: string; mountPath: string; readOnly?: boolean; subPath?: string }[];
  }[];
  for (const container of containers) {
    for (const mount of container.volumeMounts ?? []) {
      const atSkills = underSkills(mount.mountPath);
      if (!atSkills && mount.name !== SKILLS_VOLUME) continue;
      if (
        mount.name !== SKILLS_VOLUME ||
        normalizePath(mount.mountPath) !== SKILLS_TARGET ||
        mount.readOnly !== true ||
        mount.subPath !== undefined
      )
        report(
          `container ${container.name ?? "?"} mounts ${mount.name} at ${mount.mountPath}; the skills volume is mounted read-only at ${SKILLS_TARGET} only`,
        );
    }
  }
}

/** `//var/run/../run//docker.sock/` → `/run/docker.sock`, so spelling cannot hide a socket. */
function normalizePath(path: string): string {
  return posix.normalize(path).replace(/(.)\/$/, "$1");
}
