/**
 * A session's volume and network, from SessionSpec to the engine: the ONE builder of their inputs
 * and the ONE place they are made or adopted. Pure of Pulumi, like session-container.ts: the
 * DockerSession component (infra/docker/session.ts) declares these inputs, the provider
 * (provider.ts) acts on them when Pulumi asks, and the runner's fast create (runner/docker/driver.ts)
 * acts on them at once and has the stack recorded afterwards; whichever comes first makes them,
 * the other adopts them.
 */
import type Docker from "dockerode";
import { Labels, type SessionSpec, workloadName } from "../../../contracts/session-spec.ts";
import { isolateBridge } from "./host-isolation.ts";
import type { NetworkInputs, VolumeInputs } from "./schema.ts";
import { sessionLabels } from "./session-container.ts";

/** The session's named volume: the workspace, kept across stop and resume. */
export function sessionVolumeInputs(spec: SessionSpec): VolumeInputs {
  return { name: `${workloadName(spec.namespace, spec.name)}-workspace`, labels: sessionLabels(spec) };
}

/**
 * The session's internal network, isolated from the host except for the Agent's allowed
 * endpoints (single host-local addresses: a range cannot be mapped through the gateway).
 */
export function sessionNetworkInputs(spec: SessionSpec): NetworkInputs {
  for (const rule of spec.egress) {
    if (!/\/32$|^[\d.]+$/.test(rule.cidr)) {
      throw new Error(`Docker sessions reach single host-local endpoints only; ${rule.cidr} is a range`);
    }
  }
  return {
    name: `${workloadName(spec.namespace, spec.name)}-net`,
    internal: true,
    isolateFromHost: true,
    allowedEgress: spec.egress.map((r) => ({ address: r.cidr.replace(/\/32$/, ""), port: r.port })),
    labels: sessionLabels(spec),
  };
}

function isNotFound(error: unknown): boolean {
  return (error as { statusCode?: number }).statusCode === 404;
}

/** Whether an engine object's labels say it is this session's own (made by us for it). */
function ours(labels: Record<string, string> | undefined, want: Record<string, string>): boolean {
  return (
    labels?.[Labels.managedBy] === "agent-sessions" &&
    labels[Labels.namespace] === want[Labels.namespace] &&
    labels[Labels.session] === want[Labels.session]
  );
}

/** The session volume, made or (our own of the same session: a fast create, a retried create) adopted. */
export async function ensureSessionVolume(docker: Docker, inputs: VolumeInputs): Promise<void> {
  try {
    const existing = await docker.getVolume(inputs.name).inspect();
    if (existing.Labels?.[Labels.managedBy] !== "agent-sessions") {
      throw new Error(`volume ${inputs.name} exists and is not managed by agent-sessions`);
    }
  } catch (error) {
    if (!isNotFound(error)) throw error;
    await docker.createVolume({ Name: inputs.name, Labels: inputs.labels });
  }
}

/** The Linux bridge Docker makes for a network: `br-` and the first 12 characters of its id. */
export function bridgeOf(networkId: string): string {
  return `br-${networkId.slice(0, 12)}`;
}

export type SessionNetwork = { networkId: string; bridge: string; gateway: string };

/**
 * The session network, made or adopted, with the host isolation of its inputs in place. A network
 * of the name is adopted only when it is this session's own and as internal as asked (the runner's
 * fast create made it from these inputs, or a create was retried); its isolation rules are
 * installed again, which never leaves the bridge without them (host-isolation.ts). A network this
 * call made is removed again when its isolation cannot be installed.
 */
export async function ensureSessionNetwork(docker: Docker, inputs: NetworkInputs): Promise<SessionNetwork> {
  const found = await docker
    .getNetwork(inputs.name)
    .inspect()
    .catch((error: unknown) => {
      if (isNotFound(error)) return undefined;
      throw error;
    });
  let networkId: string;
  let made = false;
  if (found) {
    if (
      !ours(found.Labels, inputs.labels) ||
      found.Internal !== inputs.internal ||
      found.Name !== inputs.name
    ) {
      throw new Error(
        `network ${inputs.name} exists and is not this session's own ${inputs.internal ? "internal " : ""}network`,
      );
    }
    networkId = found.Id;
  } else {
    const created = await docker.createNetwork({
      Name: inputs.name,
      Internal: inputs.internal,
      Labels: inputs.labels,
      CheckDuplicate: true,
      // No container-to-container traffic inside the session network either.
      Options: { "com.docker.network.bridge.enable_icc": "false" },
    });
    networkId = created.id;
    made = true;
  }
  const info = found ?? (await docker.getNetwork(networkId).inspect());
  const gateway: string = info.IPAM?.Config?.[0]?.Gateway ?? "";
  const bridge = bridgeOf(networkId);
  if (inputs.isolateFromHost) {
    try {
      await isolateBridge(bridge, gateway, inputs.allowedEgress ?? []);
    } catch (error) {
      if (made)
        await docker
          .getNetwork(networkId)
          .remove()
          .catch(() => undefined);
      throw error;
    }
  }
  return { networkId, bridge, gateway };
}
