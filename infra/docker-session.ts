/**
 * A Docker session: a named volume (the workspace, survives scale-down), an internal network
 * isolated from the host except for the Agent's allowed endpoints, and — at scale 1 — one
 * hardened container pinned by digest running the runtime's v1alpha2 adapter.
 */
import * as pulumi from "@pulumi/pulumi";
import { ADAPTER_PORT } from "../contracts/adapter.ts";
import { Labels, type SessionSpec, workloadName } from "../contracts/session-spec.ts";
import { viaGateway } from "./docker-provider/gateway-url.ts";
import { type ContainerInputs, DockerTypes, type MountInput } from "./docker-provider/schema.ts";

type Inputs<T> = { [K in keyof T]: pulumi.Input<T[K]> };

class DockerVolume extends pulumi.CustomResource {
  declare readonly name: pulumi.Output<string>;
  constructor(
    name: string,
    args: { name: string; labels: Record<string, string> },
    opts?: pulumi.CustomResourceOptions,
  ) {
    super(DockerTypes.volume, name, args, opts);
  }
}

class DockerNetwork extends pulumi.CustomResource {
  declare readonly name: pulumi.Output<string>;
  declare readonly gateway: pulumi.Output<string>;
  declare readonly bridge: pulumi.Output<string>;
  constructor(
    name: string,
    args: {
      name: string;
      internal: boolean;
      isolateFromHost: boolean;
      allowedEgress: { address: string; port: number }[];
      labels: Record<string, string>;
    },
    opts?: pulumi.CustomResourceOptions,
  ) {
    super(DockerTypes.network, name, { ...args, gateway: undefined, bridge: undefined }, opts);
  }
}

class DockerContainer extends pulumi.CustomResource {
  declare readonly resolvedImageDigest: pulumi.Output<string>;
  declare readonly ipAddress: pulumi.Output<string>;
  declare readonly containerId: pulumi.Output<string>;
  constructor(name: string, args: Inputs<ContainerInputs>, opts?: pulumi.CustomResourceOptions) {
    super(
      DockerTypes.container,
      name,
      { ...args, resolvedImageDigest: undefined, ipAddress: undefined, containerId: undefined },
      {
        ...opts,
        additionalSecretOutputs: ["secretEnv"],
      },
    );
  }
}

export interface DockerSessionArgs {
  spec: SessionSpec;
  /** Credential env name → value; only what the Agent allows. Marked secret. */
  credentials: pulumi.Input<Record<string, string>>;
  /** The per-session adapter token the runner holds. Marked secret. */
  adapterToken: pulumi.Input<string>;
  /** The stack's random key of the credential hash its state keeps (docker-provider/provider.ts). Marked secret. */
  stateHashKey: pulumi.Input<string>;
}

export { viaGateway };

export class DockerSession extends pulumi.ComponentResource {
  readonly resolvedImageDigest: pulumi.Output<string>;
  readonly workloadName: pulumi.Output<string>;
  readonly endpoint: pulumi.Output<string>;
  readonly volumeName: pulumi.Output<string>;

  constructor(name: string, args: DockerSessionArgs, opts?: pulumi.ComponentResourceOptions) {
    super("agent-sessions:docker:Session", name, {}, opts);
    const { spec } = args;
    const base = workloadName(spec.namespace, spec.name);
    const labels = {
      [Labels.managedBy]: "agent-sessions",
      [Labels.namespace]: spec.namespace,
      [Labels.session]: spec.name,
    };
    for (const rule of spec.egress) {
      if (!/\/32$|^[\d.]+$/.test(rule.cidr)) {
        throw new Error(`Docker sessions reach single host-local endpoints only; ${rule.cidr} is a range`);
      }
    }
    const volume = new DockerVolume(
      `${name}-volume`,
      { name: `${base}-workspace`, labels },
      { parent: this },
    );
    const network = new DockerNetwork(
      `${name}-network`,
      {
        name: `${base}-net`,
        internal: true,
        isolateFromHost: true,
        allowedEgress: spec.egress.map((r) => ({ address: r.cidr.replace(/\/32$/, ""), port: r.port })),
        labels,
      },
      { parent: this },
    );
    this.volumeName = volume.name;
    this.workloadName = pulumi.output(base);

    if (spec.replicas === 1) {
      const mounts: MountInput[] = [
        { type: "volume", source: `${base}-workspace`, target: "/workspace" },
        { type: "tmpfs", target: "/tmp", sizeBytes: 64 * 1024 * 1024 },
      ];
      const env = network.gateway.apply((gateway) => ({
        ...Object.fromEntries(
          Object.entries(spec.env).map(([k, v]) => [k, viaGateway(v, spec.egress, gateway)]),
        ),
        ADAPTER_PORT: String(ADAPTER_PORT),
        ADAPTER_STREAMING: String(spec.streaming),
        AGENT_WORKSPACE: "/workspace",
      }));
      const container = new DockerContainer(
        `${name}-container`,
        {
          name: base,
          image: spec.image,
          env,
          secretEnv: pulumi.secret(
            pulumi
              .all([args.credentials, args.adapterToken])
              .apply(([creds, token]) => ({ ...creds, ADAPTER_TOKEN: token })),
          ),
          secretEnvHashKey: pulumi.secret(args.stateHashKey),
          user: "65532:65532",
          readOnlyRootfs: true,
          privileged: false,
          capDrop: ["ALL"],
          capAdd: [],
          securityOpt: ["no-new-privileges"],
          networkMode: network.name,
          mounts,
          memoryBytes: spec.resources.memoryMiB * 1024 * 1024,
          nanoCpus: Math.round(cpuCores(spec.resources.cpu) * 1e9),
          pidsLimit: spec.resources.pids,
          labels,
          adapterPort: ADAPTER_PORT,
        },
        { parent: this, dependsOn: [volume] },
      );
      this.resolvedImageDigest = container.resolvedImageDigest;
      this.endpoint = pulumi.interpolate`${container.ipAddress}:${ADAPTER_PORT}`;
    } else {
      // Stopped: no container. The digest is the pinned one (what a resume will run).
      this.resolvedImageDigest = pulumi.output(spec.image.split("@")[1] ?? "");
      this.endpoint = pulumi.output("");
    }
    this.registerOutputs({
      resolvedImageDigest: this.resolvedImageDigest,
      workloadName: this.workloadName,
      endpoint: this.endpoint,
      volumeName: this.volumeName,
    });
  }
}

/** "500m" → 0.5, "2" → 2. */
export function cpuCores(quantity: string): number {
  return quantity.endsWith("m") ? Number(quantity.slice(0, -1)) / 1000 : Number(quantity);
}
