import { randomUUID } from "node:crypto";
import { Readable } from "node:stream";
import type { Context } from "hono";
import { CodedError } from "../../contracts/errors.ts";
import { HARNESS_SESSION_KIND, type HarnessSession } from "../../contracts/harness-session.ts";
import type { ListMetadata } from "../../contracts/pagination.ts";
import { type Agent, API_VERSION } from "../../contracts/resources.ts";
import {
  RestoreRequest,
  SESSION_SNAPSHOT_KIND,
  SNAPSHOT_QUIESCE_MS,
  type SessionSnapshot,
  SnapshotRequest,
  snapshotStackName,
} from "../../contracts/session-snapshot.ts";
import { type Engine, Engine as EngineSchema } from "../../contracts/session-spec.ts";
import { alreadyExists } from "../lifecycle/already-exists.ts";
import type { NamespaceQuotas } from "../lifecycle/namespace-quotas.ts";
import { listQuery, pageOf } from "../lifecycle/pagination.ts";
import { parseInput } from "../lifecycle/request-body.ts";
import type { Logger } from "../observability/log.ts";
import type { RelayChunk, RunnerDirectory } from "../lifecycle/runner-directory.ts";
import { type StagedArchive, stageSnapshotArchive } from "./snapshot-archive.ts";
import { SnapshotUpload, streamSnapshotArchive } from "./snapshot-transfer.ts";
import { usableSnapshot } from "./snapshot-usable.ts";
import type { HarnessRecord, HarnessStore } from "../store/harness-store.ts";
import type { RunnerRecord, Store, WorkspaceRecord } from "../store/store.ts";
import type { HarnessController } from "./harness-controller.ts";
import { toManifest } from "./harness-status.ts";
import { snapshotTarget, storageOf } from "./snapshot-target.ts";

/** The runner link as snapshots use it: commands, and the chunks of an export (`snapshot_read`). */
export type SnapshotLink = RunnerDirectory & {
  onRelayChunk(relayId: string, listener: (chunk: RelayChunk) => void): () => void;
};

export type SessionSnapshotsOptions = {
  harness: HarnessStore;
  store: Store;
  runners: SnapshotLink;
  controller: Pick<HarnessController, "exclusive" | "event" | "restore">;
  /** Snapshots counted, and their bytes (namespace-quotas.ts). @default none */
  quotas?: NamespaceQuotas | undefined;
  /** The largest archive imported or exported (AGENT_SESSIONS_SNAPSHOT_ARCHIVE_MAX_BYTES). */
  archiveMaxBytes: number;
  log: Logger;
  /** @default () => new Date() */
  now?: () => Date;
};

/** How long the runner may take to copy a volume (beyond waiting for requests in flight). */
const COPY_TIMEOUT_MS = 15 * 60_000;
/** How long the runner may take to answer `snapshot_restore_prepare` (it answers at once). */
const PREPARE_TIMEOUT_MS = 10_000;

/**
 * SessionSnapshots (issue 38; contracts/session-snapshot.ts): `:snapshot` of a HarnessSession,
 * GET/list/DELETE, `:restore`, and the portable archive (export, import). The records live in the
 * store's resources table (kind SessionSnapshot), the storage on the engine of the runner that
 * took or imported them (status.runner); every copy is the runner's, on its engine. A snapshot
 * outlives its session. A snapshot's or a restore's work on a session runs as the session's one
 * task (HarnessController.exclusive / restore), so nothing stops, restores or deletes it meanwhile.
 */
export class SessionSnapshots {
  readonly #o: SessionSnapshotsOptions;
  readonly #now: () => Date;
  /** Snapshots being taken or imported by this process (`namespace/name`): their Pending is live. */
  readonly #inFlight = new Set<string>();

  constructor(options: SessionSnapshotsOptions) {
    this.#o = options;
    this.#now = options.now ?? (() => new Date());
  }

  get archiveMaxBytes(): number {
    return this.#o.archiveMaxBytes;
  }

  async list(
    namespace: string,
    raw: { limit?: string | undefined; continue?: string | undefined } = {},
  ): Promise<{ apiVersion: string; kind: string; metadata: ListMetadata; items: SessionSnapshot[] }> {
    const list = `sessionsnapshots/${namespace}`;
    const query = listQuery(list, raw);
    const page = pageOf(
      list,
      await this.#o.store.listResources(SESSION_SNAPSHOT_KIND, namespace, query),
      query,
      (r) => [r.metadata.name],
    );
    return {
      apiVersion: API_VERSION,
      kind: `${SESSION_SNAPSHOT_KIND}List`,
      metadata: page.next === undefined ? {} : { continue: page.next },
      items: page.items,
    };
  }

  async get(namespace: string, name: string): Promise<SessionSnapshot> {
    const snapshot = await this.#o.store.getResource(SESSION_SNAPSHOT_KIND, namespace, name);
    if (!snapshot)
      throw new CodedError("NOT_FOUND", `${SESSION_SNAPSHOT_KIND} ${namespace}/${name} not found`);
    return snapshot;
  }

  /**
   * `POST …/harnesssessions/{session}:snapshot {name}`: the runner holding the session's volume
   * copies it (`snapshot_take`: running, paused or stopped; new requests wait, those in flight are
   * waited for up to SNAPSHOT_QUIESCE_MS). Answers the snapshot once Ready. A failure (ABORTED:
   * requests did not end in time) leaves nothing: the Pending record goes.
   */
  async take(namespace: string, sessionName: string, body: unknown): Promise<SessionSnapshot> {
    const { name } = parseInput(SnapshotRequest, body, "SnapshotRequest");
    return this.#o.controller.exclusive(namespace, sessionName, async (record) => {
      if (!record)
        throw new CodedError("NOT_FOUND", `${HARNESS_SESSION_KIND} ${namespace}/${sessionName} not found`);
      if (record.deletion_requested_at !== undefined)
        throw new CodedError(
          "FAILED_PRECONDITION",
          `${HARNESS_SESSION_KIND} ${namespace}/${sessionName} is being deleted`,
        );
      const workspace = await this.#workspaceOf(record, "snapshot");
      const runner = await this.#runnerById(workspace.runner_id);
      const existing = await this.#o.store.getResource(SESSION_SNAPSHOT_KIND, namespace, name);
      if (existing) throw alreadyExists(SESSION_SNAPSHOT_KIND, namespace, name);
      await this.#assertRoom(namespace, 0);
      const target = storageOf(namespace, name, undefined, workspace.spec);
      const pending: SessionSnapshot = {
        apiVersion: API_VERSION,
        kind: SESSION_SNAPSHOT_KIND,
        metadata: { name, namespace, uid: randomUUID(), creationTimestamp: this.#now().toISOString() },
        spec: {
          sessionRef: sessionName,
          agentRef: record.spec.agentRef,
          runtimeRef: await this.#runtimeOf(record),
          resolvedImageDigest: record.resolved_image_digest ?? workspace.spec.image,
        },
        status: {
          phase: "Pending",
          message: `being taken of ${HARNESS_SESSION_KIND} ${namespace}/${sessionName}`,
          engine: runner?.engine ?? workspace.spec.engine,
          runner: runner?.runner_name ?? workspace.runner_id,
          storage: target.storage,
          stackName: snapshotStackName(namespace, name),
        },
      };
      const { created } = await this.#o.store.putResource(pending, { ifAbsent: true });
      if (!created) throw alreadyExists(SESSION_SNAPSHOT_KIND, namespace, name);
      const began = Date.now();
      const key = `${namespace}/${name}`;
      this.#inFlight.add(key);
      const outcome = await this.#o.runners
        .command(
          workspace.runner_id,
          {
            kind: "snapshot_take",
            container_name: workspace.container_name,
            target,
            quiesce_ms: SNAPSHOT_QUIESCE_MS,
          },
          SNAPSHOT_QUIESCE_MS + COPY_TIMEOUT_MS,
        )
        .finally(() => this.#inFlight.delete(key));
      if (!outcome.ok) {
        await this.#o.store.deleteResource(SESSION_SNAPSHOT_KIND, namespace, name);
        const { code, message, details } = outcome.error;
        throw new CodedError(
          code,
          code === "ABORTED"
            ? `snapshot ${name} of ${HARNESS_SESSION_KIND} ${namespace}/${sessionName} not taken: requests in flight did not end within ${SNAPSHOT_QUIESCE_MS / 1000} s (${message}); nothing was made, retry when the session is quiet`
            : `snapshot ${name} of ${HARNESS_SESSION_KIND} ${namespace}/${sessionName} failed: ${message}; nothing was kept`,
          details,
        );
      }
      const ready = await this.#ready(
        pending,
        outcome.result.size_bytes,
        pending.status.message.replace("being taken", "taken"),
      );
      this.#o.log("info", "session snapshot taken", {
        namespace,
        name,
        session: sessionName,
        size_bytes: outcome.result.size_bytes,
        ms: Date.now() - began,
      });
      await this.#o.controller.event(record, "Snapshotted", {
        snapshot: name,
        size_bytes: outcome.result.size_bytes,
        taken_in_ms: Date.now() - began,
        message: `snapshot ${name} taken (${outcome.result.size_bytes} bytes)`,
      });
      return ready;
    });
  }

  /**
   * DELETE: the holding runner destroys the storage and its stack (`snapshot_delete`), then the
   * record goes. A snapshot this process is still taking or importing is FAILED_PRECONDITION; a
   * Pending one nothing works on (left by a server that stopped meanwhile) is deleted like a
   * Ready one (the runner's delete is idempotent, whatever it made). Its runner not
   * connected: UNAVAILABLE naming it, and the record is kept as it is (still usable once the
   * runner is back): the storage cannot be freed without it, and a record dropped now would leave
   * it behind, unaccounted for.
   */
  async delete(namespace: string, name: string): Promise<SessionSnapshot> {
    const snapshot = await this.get(namespace, name);
    if (snapshot.status.phase === "Pending" && this.#inFlight.has(`${namespace}/${name}`))
      throw new CodedError(
        "FAILED_PRECONDITION",
        `${SESSION_SNAPSHOT_KIND} ${namespace}/${name} is still being taken or imported; delete it once it is Ready`,
      );
    if (snapshot.status.runner !== undefined) {
      const holder = await this.#connectedHolder(snapshot, "delete");
      const outcome = await this.#o.runners.command(
        holder.runner_id,
        { kind: "snapshot_delete", target: snapshotTarget(snapshot) },
        COPY_TIMEOUT_MS,
      );
      if (!outcome.ok)
        throw new CodedError(
          outcome.error.code,
          `deleting ${SESSION_SNAPSHOT_KIND} ${namespace}/${name} failed: ${outcome.error.message}; it is kept, DELETE again to retry`,
          outcome.error.details,
        );
    }
    await this.#o.store.deleteResource(SESSION_SNAPSHOT_KIND, namespace, name);
    return snapshot;
  }

  /**
   * `POST …/harnesssessions/{session}:restore {snapshot}`: the snapshot is checked first (Ready,
   * of this namespace, of the session's Agent and runtime, on the runner holding the session's
   * volume: else 400 INVALID_ARGUMENT naming the mismatch, nothing changed), then the controller
   * stops the session, the runner replaces the volume's files (`snapshot_restore`), and the
   * session is brought back to its desired state, resuming the conversation the snapshot holds.
   * Answers once it is back (status says Ready, or Pending while its adapter comes up).
   */
  async restore(
    namespace: string,
    sessionName: string,
    body: unknown,
  ): Promise<{ session: HarnessSession; snapshot: string; message: string }> {
    const { snapshot: snapshotName } = parseInput(RestoreRequest, body, "RestoreRequest");
    let snapshot: SessionSnapshot | undefined;
    const began = Date.now();
    const record = await this.#o.controller.restore(
      namespace,
      sessionName,
      async (current) => {
        const workspace = await this.#workspaceOf(current, "restore");
        snapshot = await this.usableFor(
          namespace,
          snapshotName,
          current.spec.agentRef,
          await this.#runtimeOf(current),
          "snapshot",
        );
        const runner = await this.#runnerById(workspace.runner_id);
        const holder = snapshot.status.runner;
        if (holder !== runner?.runner_name && holder !== workspace.runner_id)
          throw new CodedError(
            "INVALID_ARGUMENT",
            `snapshot: ${SESSION_SNAPSHOT_KIND} ${namespace}/${snapshotName} is held by runner ${holder ?? "(none)"}, but ${HARNESS_SESSION_KIND} ${namespace}/${sessionName}'s volume is on runner ${runner?.runner_name ?? workspace.runner_id}: a restore copies on one engine; fork the snapshot instead (a new session with spec.source.snapshotRef)`,
            {
              field_violations: [
                { field: "snapshot", description: "held by another runner than the session" },
              ],
            },
          );
        // The runner readies the restore (on Kubernetes it starts the copy pod) while the session
        // is being stopped; it copies nothing until `snapshot_restore`. Its answer is not waited
        // for: a runner that cannot ready anything answers an error, and the restore readies its own.
        void this.#o.runners
          .command(
            workspace.runner_id,
            {
              kind: "snapshot_restore_prepare",
              container_name: workspace.container_name,
              source: snapshotTarget(snapshot, workspace.spec),
            },
            PREPARE_TIMEOUT_MS,
          )
          .catch(() => undefined);
      },
      async (stopped) => {
        const workspace = await this.#workspaceOf(stopped, "restore");
        if (!snapshot) throw new CodedError("INTERNAL", "restore: the snapshot was not checked");
        const outcome = await this.#o.runners.command(
          workspace.runner_id,
          {
            kind: "snapshot_restore",
            container_name: workspace.container_name,
            source: snapshotTarget(snapshot, workspace.spec),
          },
          COPY_TIMEOUT_MS,
        );
        if (!outcome.ok)
          throw new CodedError(
            outcome.error.code,
            `restoring ${HARNESS_SESSION_KIND} ${namespace}/${sessionName} from snapshot ${snapshotName} failed: ${outcome.error.message}; the session is left stopped, write its spec to bring it back`,
            outcome.error.details,
          );
        await this.#o.controller.event(stopped, "Restored", {
          snapshot: snapshotName,
          message: `volume restored from snapshot ${snapshotName}; what came after it is gone`,
        });
      },
    );
    const session = toManifest(record);
    const back = session.status.phase !== "Pending";
    this.#o.log("info", "harness session restored from a snapshot", {
      namespace,
      name: sessionName,
      snapshot: snapshotName,
      phase: session.status.phase,
      ms: Date.now() - began,
    });
    return {
      session,
      snapshot: snapshotName,
      message: back
        ? `restored from snapshot ${snapshotName}; the session is ${session.status.phase}`
        : `restored from snapshot ${snapshotName}; the session is resuming (${session.status.phase})`,
    };
  }

  /**
   * The snapshot `name` of `namespace` a fork or a restore may use: it exists, is Ready, and was
   * taken of `agentRef` on `runtimeRef`; else INVALID_ARGUMENT naming `field` and the mismatch.
   */
  async usableFor(
    namespace: string,
    name: string,
    agentRef: string,
    runtimeRef: string | undefined,
    field: string,
  ): Promise<SessionSnapshot> {
    return usableSnapshot(this.#o.store, namespace, name, agentRef, runtimeRef, field);
  }

  /**
   * `GET …/sessionsnapshots/{name}/archive`: a gzip-compressed tar, `manifest.json` first, then the
   * runner's tar of the snapshot (`snapshot_read`, entries under `volume/`), streamed through.
   * Past AGENT_SESSIONS_SNAPSHOT_ARCHIVE_MAX_BYTES uncompressed the runner stops (413 before the
   * first byte, a cut body after).
   */
  async exportArchive(c: Context, namespace: string, name: string): Promise<Response> {
    const snapshot = await this.get(namespace, name);
    if (snapshot.status.phase !== "Ready")
      throw new CodedError(
        "FAILED_PRECONDITION",
        `${SESSION_SNAPSHOT_KIND} ${namespace}/${name} is not Ready`,
      );
    const holder = await this.#connectedHolder(snapshot, "export");
    const gzip = await streamSnapshotArchive(
      this.#o.runners,
      snapshot,
      holder.runner_id,
      this.#o.archiveMaxBytes,
    );
    return c.body(Readable.toWeb(gzip) as ReadableStream<Uint8Array>, 200, {
      "content-type": "application/gzip",
      "content-disposition": `attachment; filename="${namespace}-${name}.snapshot.tar.gz"`,
    });
  }

  /**
   * `PUT …/sessionsnapshots/{name}/archive`: the archive is checked and staged whole
   * (snapshot-archive.ts) before anything is made; then a connected runner (of `engine` when one
   * is, else any not draining) gets it in pieces (`snapshot_write`) and extracts it into a new
   * storage; the snapshot is Ready with the runner's size, its spec the manifest's.
   */
  async importArchive(
    c: Context,
    namespace: string,
    name: string,
    engine: string | undefined,
  ): Promise<SessionSnapshot> {
    const preferred =
      engine === undefined
        ? undefined
        : parseInput(EngineSchema, engine, "engine", { in: "query", name: "engine" });
    if (await this.#o.store.getResource(SESSION_SNAPSHOT_KIND, namespace, name))
      throw alreadyExists(SESSION_SNAPSHOT_KIND, namespace, name);
    const max = this.#o.archiveMaxBytes;
    const declared = Number(c.req.header("content-length") ?? Number.NaN);
    if (declared > max)
      throw new CodedError(
        "RESOURCE_EXHAUSTED",
        `the archive is ${declared} bytes, over ${max} (AGENT_SESSIONS_SNAPSHOT_ARCHIVE_MAX_BYTES)`,
        { limit_bytes: max },
      );
    await this.#assertRoom(namespace, 0);
    const runner = this.#importRunner(preferred);
    const target = storageOf(namespace, name, undefined);
    // The checked tar goes to the runner while the archive is read (snapshot-transfer.ts), its
    // last piece, which makes the storage, only once all of it passed and its record is made.
    const upload = new SnapshotUpload(this.#o.runners, runner, target);
    const began = performance.now();
    let staged: StagedArchive;
    try {
      staged = await stageSnapshotArchive(c.req.raw.body, { maxBytes: max, sink: upload.sink });
      await this.#assertRoom(namespace, staged.bytes);
    } catch (error) {
      await upload.abort();
      throw error;
    }
    const stagedAt = performance.now();
    const { manifest } = staged;
    const pending: SessionSnapshot = {
      apiVersion: API_VERSION,
      kind: SESSION_SNAPSHOT_KIND,
      metadata: { name, namespace, uid: randomUUID(), creationTimestamp: this.#now().toISOString() },
      spec: manifest.spec,
      status: {
        phase: "Pending",
        message: `being imported from an archive of ${manifest.source.namespace}/${manifest.source.name}${manifest.source.engine ? ` (${manifest.source.engine})` : ""}`,
        engine: runner.engine,
        runner: runner.runner_name,
        storage: target.storage,
        stackName: snapshotStackName(namespace, name),
      },
    };
    const { created } = await this.#o.store.putResource(pending, { ifAbsent: true }).catch(async (error) => {
      await upload.abort();
      throw error;
    });
    if (!created) {
      await upload.abort();
      throw alreadyExists(SESSION_SNAPSHOT_KIND, namespace, name);
    }
    const key = `${namespace}/${name}`;
    this.#inFlight.add(key);
    try {
      const sizeBytes = await upload.finish().finally(() => this.#inFlight.delete(key));
      this.#o.log("info", "session snapshot imported", {
        namespace,
        name,
        bytes: staged.bytes,
        stage_ms: Math.round(stagedAt - began),
        finish_ms: Math.round(performance.now() - stagedAt),
      });
      return await this.#ready(
        pending,
        sizeBytes,
        pending.status.message.replace("being imported", "imported"),
      );
    } catch (error) {
      await upload.abort();
      await this.#o.store.deleteResource(SESSION_SNAPSHOT_KIND, namespace, name);
      throw error;
    }
  }

  /** A connected runner to import onto: of the engine asked for when one is, else any; none: UNAVAILABLE. */
  #importRunner(engine: Engine | undefined): RunnerRecord {
    const open = this.#o.runners.connectedRunners().filter((r) => !r.draining);
    const chosen = open.find((r) => r.engine === engine) ?? open[0];
    if (!chosen)
      throw new CodedError(
        "UNAVAILABLE",
        "no connected runner can take the snapshot (none connected, or all draining); nothing was made",
      );
    return chosen;
  }

  async #ready(pending: SessionSnapshot, sizeBytes: number, message: string): Promise<SessionSnapshot> {
    const ready: SessionSnapshot = {
      ...pending,
      status: {
        ...pending.status,
        phase: "Ready",
        sizeBytes,
        message,
        readyTime: this.#now().toISOString(),
      },
    };
    return (await this.#o.store.putResource(ready)).resource;
  }

  /** The session's workspace; a session never provisioned (no volume) is FAILED_PRECONDITION. */
  async #workspaceOf(record: HarnessRecord, what: "snapshot" | "restore"): Promise<WorkspaceRecord> {
    const workspace =
      record.container_name === undefined
        ? undefined
        : await this.#o.store.getWorkspace(record.container_name);
    if (!workspace)
      throw new CodedError(
        "FAILED_PRECONDITION",
        `${HARNESS_SESSION_KIND} ${record.namespace}/${record.name} was never provisioned: it has no volume to ${what === "snapshot" ? "snapshot" : "restore into"} yet`,
      );
    return workspace;
  }

  /** The session's runtime: its spec's, else its Agent's. */
  async #runtimeOf(record: HarnessRecord): Promise<string> {
    if (record.spec.runtimeRef !== undefined) return record.spec.runtimeRef;
    const agent = (await this.#o.store.getResource("Agent", record.namespace, record.spec.agentRef)) as
      | Agent
      | undefined;
    if (!agent)
      throw new CodedError(
        "FAILED_PRECONDITION",
        `Agent ${record.namespace}/${record.spec.agentRef} not found`,
      );
    return agent.spec.runtimeRef;
  }

  async #runnerById(runnerId: string): Promise<RunnerRecord | undefined> {
    return (await this.#o.store.listRunners()).find((r) => r.runner_id === runnerId);
  }

  /** The connected runner holding the snapshot's storage; else UNAVAILABLE naming it (nothing changed). */
  async #connectedHolder(snapshot: SessionSnapshot, what: "delete" | "export"): Promise<RunnerRecord> {
    const name = snapshot.status.runner ?? "(unknown)";
    const stored = await this.#o.store.findRunner(name);
    const connected = this.#o.runners.connectedRunners().find((r) => r.runner_id === stored?.runner_id);
    if (!connected) {
      const { namespace, name: snap } = snapshot.metadata;
      throw new CodedError(
        "UNAVAILABLE",
        `runner ${name}, which holds ${SESSION_SNAPSHOT_KIND} ${namespace}/${snap}, is not connected: ${
          what === "delete"
            ? "its storage cannot be freed without it, so the snapshot is kept; DELETE again once the runner is back"
            : "export it once the runner is back"
        }`,
        { remedy: `start runner ${name} again` },
      );
    }
    return connected;
  }

  /** Snapshots of the namespace and their bytes within its quotas (RESOURCE_EXHAUSTED otherwise). */
  async #assertRoom(namespace: string, addingBytes: number): Promise<void> {
    const quotas = this.#o.quotas;
    if (!quotas) return;
    const counted = quotas.limit("snapshots", namespace) !== undefined;
    const sized = quotas.limit("snapshotBytes", namespace) !== undefined;
    if (!counted && !sized) return;
    const all = await this.#o.store.listResources(SESSION_SNAPSHOT_KIND, namespace);
    if (counted && addingBytes === 0) quotas.assertRoom("snapshots", namespace, all.length);
    if (sized) {
      const used = all.reduce((sum, s) => sum + (s.status.sizeBytes ?? 0), 0);
      quotas.assertRoom("snapshotBytes", namespace, used, addingBytes);
    }
  }
}
