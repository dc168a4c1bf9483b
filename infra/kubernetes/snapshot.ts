/**
 * A snapshot's storage on Kubernetes (contracts/session-snapshot.ts): one PVC, labelled with the
 * snapshot's namespace and name, in a stack of its own so it outlives the session it was taken
 * from and goes only with the snapshot. The runner applies the claim and copies into it at once
 * (runner/kubernetes/snapshots.ts); this stack records it behind (server-side apply adopts it).
 */
import * as k8s from "@pulumi/kubernetes";
import * as pulumi from "@pulumi/pulumi";
import type { SnapshotStackSpec } from "../../contracts/session-spec.ts";
import { snapshotPvcManifest } from "./snapshot-manifest.ts";

export class KubernetesSnapshotStorage extends pulumi.ComponentResource {
  readonly storage: pulumi.Output<string>;

  constructor(name: string, spec: SnapshotStackSpec, opts?: pulumi.ComponentResourceOptions) {
    super("agent-sessions:kubernetes:SnapshotStorage", name, {}, opts);
    const pvc = new k8s.core.v1.PersistentVolumeClaim(`${name}-storage`, snapshotPvcManifest(spec), {
      parent: this,
      protect: false,
    });
    this.storage = pvc.metadata.name;
    this.registerOutputs({ storage: this.storage });
  }
}
