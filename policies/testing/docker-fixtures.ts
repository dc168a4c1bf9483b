import {
  type ContainerInputs,
  DockerTypes,
  type NetworkInputs,
  type VolumeInputs,
} from "../../infra/docker/provider/schema.ts";
import type { DockerNetworkEgress } from "../judged-resources.ts";
import { SESSION_IMAGE } from "./kubernetes-fixtures.ts";
import type { FakeResource } from "./policy-harness.ts";

/**
 * A compliant Docker session, the resources of our own provider (infra/docker/provider/schema.ts):
 * a volume, an internal network isolated from the host, one hardened container on both.
 */

const LABELS = { "agent-sessions.dev/session": "demo" };
const VOLUME_NAME = "agent-sessions-demo-workspace";
const NETWORK_NAME = "agent-sessions-demo";

export function dockerContainer(change?: (container: ContainerInputs) => void): FakeResource {
  const props: ContainerInputs = {
    name: "agent-sessions-demo",
    image: SESSION_IMAGE,
    env: { LOG_LEVEL: "info" },
    secretEnv: { OPENAI_API_KEY: "sk-test" },
    secretEnvHashKey: "fixture-hash-key-0123456789",
    user: "10001:10001",
    readOnlyRootfs: true,
    privileged: false,
    capDrop: ["ALL"],
    capAdd: [],
    securityOpt: ["no-new-privileges:true"],
    networkMode: NETWORK_NAME,
    mounts: [
      { type: "volume", source: VOLUME_NAME, target: "/workspace" },
      { type: "tmpfs", target: "/tmp", sizeBytes: 64 * 1024 * 1024 },
    ],
    memoryBytes: 1024 * 1024 * 1024,
    nanoCpus: 1_000_000_000,
    pidsLimit: 256,
    labels: { ...LABELS },
    adapterPort: 8080,
  };
  change?.(props);
  return { type: DockerTypes.container, name: "demo", props };
}

/** The provider also takes `allowedEgress`: host endpoints opened through the gateway. */
type NetworkProps = NetworkInputs & { allowedEgress: DockerNetworkEgress[] };

/** Reaches one allowed model endpoint on the host, as infra/docker/session.ts declares it. */
export function dockerNetwork(change?: (network: NetworkProps) => void): FakeResource {
  const props: NetworkProps = {
    name: NETWORK_NAME,
    internal: true,
    isolateFromHost: true,
    allowedEgress: [{ address: "10.213.0.1", port: 11434 }],
    labels: { ...LABELS },
  };
  change?.(props);
  return { type: DockerTypes.network, name: "demo", props };
}

export function dockerVolume(change?: (volume: VolumeInputs) => void): FakeResource {
  const props: VolumeInputs = { name: VOLUME_NAME, labels: { ...LABELS } };
  change?.(props);
  return { type: DockerTypes.volume, name: "demo", props };
}

/** The whole compliant session stack. */
export function dockerSession(): FakeResource[] {
  return [dockerVolume(), dockerNetwork(), dockerContainer()];
}
