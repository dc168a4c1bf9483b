import { createHash } from "node:crypto";
import { z } from "zod";
import { API_VERSION, ObjectMeta } from "./resources.ts";
import { DnsLabel, Engine, LABEL_PREFIX, Labels, SnapshotStorage } from "./session-spec.ts";

export { SnapshotStorage };

/**
 * SessionSnapshot (issue 38): a copy of a session's volume, taken between two requests. Every
 * shipped runtime keeps its conversation on that volume, so a snapshot holds the agent's work AND
 * its conversation: a session created from one (`spec.source.snapshotRef`) is a fork of the agent,
 * `:restore` rolls a session back to one, and its archive carries it to another installation or
 * engine.
 *
 * A snapshot's storage lives on the engine of the runner that took (or imported) it: a Docker
 * volume or a Kubernetes PVC named `snapshotStorageName(namespace, name)`, declared in a stack of
 * its own (`snapshotStackName`), so it outlives the session, is judged by the policy pack and is
 * destroyed with the snapshot. The copy is made by the runner on the engine (never through the
 * server); only export and import stream it through the server.
 */
export const SESSION_SNAPSHOT_KIND = "SessionSnapshot";

/** Copied from the session at snapshot time; immutable. */
export const SessionSnapshotSpec = z.strictObject({
  /** The session it was taken from (kept after that session is deleted). */
  sessionRef: DnsLabel,
  agentRef: DnsLabel,
  runtimeRef: DnsLabel,
  /** The image the session ran when the snapshot was taken. */
  resolvedImageDigest: z.string().min(1).max(512),
});
export type SessionSnapshotSpec = z.infer<typeof SessionSnapshotSpec>;

export const SnapshotPhase = z.enum(["Pending", "Ready", "Failed"]);
export type SnapshotPhase = z.infer<typeof SnapshotPhase>;

export const SessionSnapshotStatus = z.object({
  phase: SnapshotPhase,
  /** Bytes of the files in the snapshot (their apparent sizes summed), once Ready. */
  sizeBytes: z.number().int().nonnegative().optional(),
  /** For people: why Pending or Failed, where it came from (an import). */
  message: z.string(),
  /** The engine holding the storage. */
  engine: Engine.optional(),
  /** The runner whose engine holds the storage: a fork of the snapshot is placed on it. */
  runner: z.string().optional(),
  /** The storage's name on that engine (a Docker volume, a Kubernetes PVC). */
  storage: z.string().optional(),
  /** The stack declaring the storage (`pulumi stack ls`, `policy check -s`). */
  stackName: z.string().optional(),
  /** When it became Ready. */
  readyTime: z.string().optional(),
});
export type SessionSnapshotStatus = z.infer<typeof SessionSnapshotStatus>;

export const SessionSnapshot = z.strictObject({
  apiVersion: z.literal(API_VERSION),
  kind: z.literal(SESSION_SNAPSHOT_KIND),
  metadata: ObjectMeta.extend({ uid: z.string(), creationTimestamp: z.string() }),
  spec: SessionSnapshotSpec,
  status: SessionSnapshotStatus,
});
export type SessionSnapshot = z.infer<typeof SessionSnapshot>;

/** `POST …/harnesssessions/{name}:snapshot`. */
export const SnapshotRequest = z.strictObject({ name: DnsLabel });
export type SnapshotRequest = z.infer<typeof SnapshotRequest>;

/** `POST …/harnesssessions/{name}:restore`. */
export const RestoreRequest = z.strictObject({ snapshot: DnsLabel });
export type RestoreRequest = z.infer<typeof RestoreRequest>;

/**
 * HarnessSession `spec.source`: where a new session's volume comes from. Immutable. With
 * `snapshotRef` the session is a fork: its volume starts as a copy of that snapshot (a
 * SessionSnapshot of the session's namespace, Ready, of the same Agent and runtime), made once,
 * before its agent first starts, which then resumes the conversation the snapshot holds.
 */
export const SessionSource = z.strictObject({ snapshotRef: DnsLabel });
export type SessionSource = z.infer<typeof SessionSource>;

/**
 * How long a snapshot waits for the requests in flight on the session to end before it gives up
 * with ABORTED (409); new requests wait while it is taken. @default 30 s
 */
export const SNAPSHOT_QUIESCE_MS = 30_000;

/**
 * The storage of a snapshot on the engine: a DNS label (a Docker volume name, a PVC name) that no
 * session object can have (session objects begin `as-`), one snapshot's only. Over 63
 * characters: a readable prefix and 64 bits of a SHA-256 of the full name.
 */
export function snapshotStorageName(namespace: string, name: string): string {
  const base = `ss-${DnsLabel.parse(namespace)}--${DnsLabel.parse(name)}`;
  if (base.length <= 63) return base;
  const hash = createHash("sha256").update(base).digest("hex").slice(0, 16);
  const head = base.slice(3, 63 - 4 - hash.length - 1).replace(/-+$/, "");
  return `ss--${head}-${hash}`;
}

/** Label keys of a snapshot's storage on the engine (beside `Labels.managedBy`). */
export const SnapshotLabels = {
  namespace: `${LABEL_PREFIX}/snapshot-namespace`,
  snapshot: `${LABEL_PREFIX}/snapshot`,
} as const;

/**
 * The labels of a snapshot's storage (a Docker volume, a PVC): ours, and whose. Never a session's
 * labels, so nothing that looks for a session's objects by label finds a snapshot.
 */
export function snapshotLabels(target: Pick<SnapshotStorage, "namespace" | "name">): Record<string, string> {
  return {
    [Labels.managedBy]: "agent-sessions",
    [SnapshotLabels.namespace]: target.namespace,
    [SnapshotLabels.snapshot]: target.name,
  };
}

/**
 * The stack declaring a snapshot's storage: `<namespace>--<name>--snapshot`. A DNS label never
 * holds `--`, so no session stack (`<namespace>--<name>`) has this form.
 */
export function snapshotStackName(namespace: string, name: string): string {
  return `${DnsLabel.parse(namespace)}--${DnsLabel.parse(name)}--snapshot`;
}

/**
 * The archive of a snapshot (`GET/PUT …/sessionsnapshots/{name}/archive`): a gzip-compressed tar
 * whose first entry is `manifest.json` (SnapshotManifest) and whose other entries are the volume's
 * files under `volume/`. Import accepts regular files, directories and symlinks whose target stays
 * inside the volume; anything else (`..`, absolute paths, hard links, devices, FIFOs, a link
 * leading out) is refused before anything is made.
 */
export const SNAPSHOT_ARCHIVE_MANIFEST = "manifest.json";
export const SNAPSHOT_ARCHIVE_ROOT = "volume/";
export const SNAPSHOT_ARCHIVE_FORMAT = "agent-sessions.dev/snapshot-archive/v1";

export const SnapshotManifest = z.strictObject({
  format: z.literal(SNAPSHOT_ARCHIVE_FORMAT),
  /** Where it was taken: the namespace and name of the snapshot, the engine. */
  source: z.strictObject({ namespace: DnsLabel, name: DnsLabel, engine: Engine.optional() }),
  spec: SessionSnapshotSpec,
  sizeBytes: z.number().int().nonnegative(),
  createdAt: z.string(),
});
export type SnapshotManifest = z.infer<typeof SnapshotManifest>;

/** @default of the largest snapshot archive imported (compressed bytes): 1 GiB (AGENT_SESSIONS_SNAPSHOT_ARCHIVE_MAX_BYTES). */
export const DEFAULT_SNAPSHOT_ARCHIVE_MAX_BYTES = 1024 * 1024 * 1024;
