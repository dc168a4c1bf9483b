/**
 * The session program: the root Pulumi project's program. Every session is a stack of it; the
 * stack config carries the session spec (validated with the shared zod schema), the outputs
 * carry what the runner and `pulumi stack output` need.
 */
import * as pulumi from "@pulumi/pulumi";
import { parseOrThrow } from "../contracts/errors.ts";
import { SessionSpec, SnapshotStackSpec } from "../contracts/session-spec.ts";

/**
 * The stack's resources and outputs. Only the engine's component is loaded: a Docker stack never
 * loads @pulumi/kubernetes (about a second of every `up`, `preview` and `refresh`).
 */
export async function sessionProgram() {
  const config = new pulumi.Config("agent-sessions");
  // A snapshot's stack (stacks/stack-manager.ts upSnapshot) declares only that snapshot's storage.
  const snapshot = config.getObject("snapshot");
  if (snapshot !== undefined) return snapshotProgram(snapshot);
  const spec = parseOrThrow(SessionSpec, config.requireObject("spec"), "session spec");
  const credentials = config.getSecretObject<Record<string, string>>("credentials") ?? pulumi.secret({});
  const adapterToken = config.requireSecret("adapterToken");
  // Written by the StackManager once per stack (stacks/stack-manager.ts): keys the hash of the
  // credentials the Docker state keeps, so that hash tells nothing without it. A stack of an older
  // version previewed by hand has none yet: its adapter token (also a random secret of the stack)
  // stands in, so the preview works; its next `up` writes the key.
  const stateHashKey = config.getSecret("stateHashKey") ?? adapterToken;
  const args = { spec, credentials, adapterToken, stateHashKey };
  const session =
    spec.engine === "docker"
      ? new (await import("./docker/session.ts")).DockerSession(spec.name, args)
      : new (await import("./kubernetes/session.ts")).KubernetesSession(spec.name, args);
  return {
    resolvedImageDigest: session.resolvedImageDigest,
    workloadName: session.workloadName,
    endpoint: session.endpoint,
    volumeName: session.volumeName,
    replicas: spec.replicas,
  };
}

/** A snapshot's stack: its storage (a Docker volume, a PVC), nothing else. */
async function snapshotProgram(config: unknown) {
  const spec = parseOrThrow(SnapshotStackSpec, config, "snapshot stack spec");
  const storage =
    spec.engine === "docker"
      ? new (await import("./docker/snapshot.ts")).DockerSnapshotStorage(spec.target.name, spec)
      : new (await import("./kubernetes/snapshot.ts")).KubernetesSnapshotStorage(spec.target.name, spec);
  return { storage: storage.storage };
}
