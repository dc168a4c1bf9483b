/**
 * The volume of a snapshot's storage (contracts/session-snapshot.ts), the ONE builder of its inputs:
 * the snapshot stack (infra/docker/snapshot.ts) declares them and the runner's copy
 * (runner/docker/snapshots.ts) makes the volume from them at once; whichever comes first makes
 * it, the other adopts it.
 */
import { snapshotLabels } from "../../../contracts/session-snapshot.ts";
import type { SnapshotStorage } from "../../../contracts/session-spec.ts";
import type { VolumeInputs } from "./schema.ts";

export function snapshotVolumeInputs(target: SnapshotStorage): VolumeInputs {
  return { name: target.storage, labels: snapshotLabels(target) };
}
