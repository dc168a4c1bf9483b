/**
 * A Docker session: a named volume (the workspace, survives scale-down), an internal network
 * isolated from the host except for the Agent's allowed endpoints, and — at scale 1 — one
 * hardened container pinned by digest running the runtime's v1alpha2 adapter.
 */
import * as pulumi from "@pulumi/pulumi";
import { ADAPTER_PORT } from "../../contracts/adapter.ts";
import { type SessionSpec, workloadName } from "../../contracts/session-spec.ts";
import { viaGateway } from "./provider/gateway-url.ts";
import { type ContainerInputs, DockerTypes } from "./provider/schema.ts";
import {
  containerEnv,
  containerSecretEnv,
  containerSpecInputs,
  cpuCores,
} from "./provider/session-container.ts";
import { sessionNetworkInputs, sessionVolumeInputs } from "./provider/session-network.ts";

type Inputs<T> = { [K in keyof T]: pulumi.Input<T[K]> };

export class DockerVolume extends pulumi.CustomResource {
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
    const volume = new DockerVolume(`${name}-volume`, sessionVolumeInputs(spec), { parent: this });
    const network = new DockerNetwork(`${name}-network`, sessionNetworkInputs(spec), { parent: this });
    this.volumeName = volume.name;
    this.workloadName = pulumi.output(base);

    if (spec.replicas === 1) {
      // The one builder of the container's inputs (docker-provider/session-container.ts): the
      // runner's fast path makes the same container from the same function.
      const container = new DockerContainer(
        `${name}-container`,
        {
          ...containerSpecInputs(spec),
          networkMode: network.name,
          env: network.gateway.apply((gateway) => containerEnv(spec, gateway)),
          secretEnv: pulumi.secret(
            pulumi
              .all([args.credentials, args.adapterToken])
              .apply(([creds, token]) => containerSecretEnv(creds, token)),
          ),
          secretEnvHashKey: pulumi.secret(args.stateHashKey),
        },
        { parent: this, dependsOn: [volume] },
      );
      this.resolvedImageDigest = container.resolvedImageDigest;
      this.endpoint = pulumi.interpolate`${container.ipAddress}:${spec.session?.port ?? ADAPTER_PORT}`;
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

export { cpuCores };
