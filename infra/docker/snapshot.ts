/**
 * A snapshot's storage on Docker (contracts/session-snapshot.ts): one named volume, labelled with
 * the snapshot's namespace and name, in a stack of its own so it outlives the session it was
 * taken from and goes only with the snapshot. The runner makes the volume and copies into it at
 * once (runner/docker/snapshots.ts); this stack records it behind, adopting the volume (the
 * provider's volume create adopts our own: infra/docker/provider/session-network.ts).
 */
import * as pulumi from "@pulumi/pulumi";
import type { SnapshotStackSpec } from "../../contracts/session-spec.ts";
import { snapshotVolumeInputs } from "./provider/snapshot-volume.ts";
import { DockerVolume } from "./session.ts";

export class DockerSnapshotStorage extends pulumi.ComponentResource {
  readonly storage: pulumi.Output<string>;

  constructor(name: string, spec: SnapshotStackSpec, opts?: pulumi.ComponentResourceOptions) {
    super("agent-sessions:docker:SnapshotStorage", name, {}, opts);
    const volume = new DockerVolume(`${name}-storage`, snapshotVolumeInputs(spec.target), { parent: this });
    this.storage = volume.name;
    this.registerOutputs({ storage: this.storage });
  }
}
