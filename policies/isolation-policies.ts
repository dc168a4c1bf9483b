import { posix } from "node:path";
import type { ResourceValidationPolicy } from "@pulumi/policy";
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
    "volume, Docker mounts are volume or tmpfs (never bind) and never an engine socket.",
  validateResource: validateKinds({
    podSpec: (spec, report) => {
      for (const volume of spec.volumes ?? []) {
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
      for (const mount of container.mounts ?? []) {
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

/** `//var/run/../run//docker.sock/` → `/run/docker.sock`, so spelling cannot hide a socket. */
function normalizePath(path: string): string {
  return posix.normalize(path).replace(/(.)\/$/, "$1");
}
