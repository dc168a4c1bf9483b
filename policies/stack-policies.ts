import type { PolicyResource, StackValidationPolicy } from "@pulumi/policy";
import { DockerTypes } from "../infra/docker/provider/schema.ts";
import { SKILLS_TARGET, skillsVolumeName } from "../infra/docker/provider/session-skills.ts";
import { type DockerContainer, KubeKinds, namespaceOf, podTemplateOf, propsOf } from "./judged-resources.ts";

/**
 * References that must resolve inside the session's own stack: a session is one stack, so a
 * network or volume it uses but does not declare belongs to something else (another session,
 * the control plane) and would break the isolation the per-resource policies establish.
 */

export const dockerContainerOnStackNetwork: StackValidationPolicy = {
  name: "docker-container-on-stack-network",
  description:
    "Every Docker container's networkMode names a Network of the same stack (which " +
    "docker-internal-network holds to internal and isolated from the host).",
  validateStack: (args, report) => {
    const networks = new Set(
      args.resources.filter((r) => r.type === DockerTypes.network).map((r) => String(r.props.name)),
    );
    for (const [resource, container] of dockerContainers(args.resources)) {
      const mode = container.networkMode ?? "";
      if (!networks.has(mode)) {
        report(
          `container ${resource.name} joins network "${mode}", which is not a Network of this stack`,
          resource.urn,
        );
      }
    }
  },
};

export const mountsOnlyStackVolumes: StackValidationPolicy = {
  name: "mounts-only-stack-volumes",
  description:
    "Every persistent volume a session mounts is one its own stack declares: a PersistentVolumeClaim " +
    "of the stack in the pod's namespace (Kubernetes), a Volume of the stack (Docker).",
  validateStack: (args, report) => {
    const claims = new Set(
      args.resources.flatMap((resource) => {
        const claim = propsOf(resource, KubeKinds.PersistentVolumeClaim);
        return claim === undefined ? [] : [`${namespaceOf(resource)}/${claim.metadata?.name}`];
      }),
    );
    const configMaps = new Set(
      args.resources.flatMap((resource) => {
        const map = propsOf(resource, KubeKinds.ConfigMap);
        return map === undefined ? [] : [`${namespaceOf(resource)}/${map.metadata?.name}`];
      }),
    );
    for (const resource of args.resources) {
      const spec = podTemplateOf(resource)?.spec;
      for (const volume of spec?.volumes ?? []) {
        const mapName = volume.configMap?.name;
        if (mapName !== undefined && !configMaps.has(`${namespaceOf(resource)}/${mapName}`)) {
          report(
            `${resource.name} mounts ConfigMap "${mapName}", which is not a ConfigMap of this stack`,
            resource.urn,
          );
        }
        const claimName = volume.persistentVolumeClaim?.claimName;
        if (claimName !== undefined && !claims.has(`${namespaceOf(resource)}/${claimName}`)) {
          report(
            `${resource.name} mounts claim "${claimName}", which is not a PersistentVolumeClaim of this stack`,
            resource.urn,
          );
        }
      }
    }

    const volumes = new Set(
      args.resources.filter((r) => r.type === DockerTypes.volume).map((r) => String(r.props.name)),
    );
    for (const [resource, container] of dockerContainers(args.resources)) {
      for (const mount of container.mounts ?? []) {
        // An anonymous volume (no source) is created fresh for this container alone; the
        // container's own skills volume, read-only at /skills, is made with it (session-skills.ts).
        const ownSkills =
          mount.source === skillsVolumeName(container.name ?? "") &&
          mount.target === SKILLS_TARGET &&
          mount.readOnly === true;
        if (
          mount.type === "volume" &&
          mount.source !== undefined &&
          !volumes.has(mount.source) &&
          !ownSkills
        ) {
          report(
            `container ${resource.name} mounts volume "${mount.source}", which is not a Volume of this stack`,
            resource.urn,
          );
        }
      }
    }
  },
};

function dockerContainers(resources: readonly PolicyResource[]): [PolicyResource, DockerContainer][] {
  return resources
    .filter((resource) => resource.type === DockerTypes.container)
    .map((resource) => [resource, resource.props as DockerContainer]);
}
