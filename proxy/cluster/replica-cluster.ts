import type { RunnerCommand } from "../../contracts/runner-protocol.ts";
import { type KeyedLocks, processLocks } from "../lifecycle/keyed-mutex.ts";
import type { Outcome, RelayChunk } from "../lifecycle/runner-directory.ts";
import type { RunnerRecord } from "../store/store.ts";

/** A runner attached to another live replica. */
export type RemoteLink = { replicaId: string; runner: RunnerRecord };

/** A command to run on the runner linked to this replica, for a caller on another replica. */
export type ForwardedCommand = {
  runnerId: string;
  command: RunnerCommand;
  timeoutMs: number;
  /** The relayed request's chunks, as the runner sends them, back to the caller. */
  onChunk: (chunk: RelayChunk) => void;
};

/** Runs a forwarded command on a local link (the hub); never throws. */
export type ForwardedCommandHandler = (forwarded: ForwardedCommand) => Promise<Outcome<unknown>>;

/**
 * What a server replica shares with the others over one database (issue 20). The embedded
 * SQLite default is one replica alone (`singleReplica`): every method is what one process did
 * before. Over PostgreSQL (postgres-replica-cluster.ts):
 *
 * - `locks`: one holder per key across replicas (advisory locks), for placement, idempotency
 *   keys (`client_request_id`), warm-pool claims and each session's lifecycle;
 * - `leads()`: the controllers' lease (idle sweep, reconcilers, warm pools, reattach expiry run
 *   on the replica holding it; it moves when its holder dies);
 * - runner links: which live replica each runner is attached to, and commands for a runner
 *   attached elsewhere forwarded to that replica (a mailbox table + LISTEN/NOTIFY);
 * - frames: every replica learns of frames written by the others and publishes them to its own
 *   followers, in the store's order.
 */
export interface ReplicaCluster {
  readonly replicaId: string;
  /** Whether other replicas may share the database (false: the embedded single replica). */
  readonly shared: boolean;
  readonly locks: KeyedLocks;
  /** Whether this replica runs the controller loops now. */
  leads(): boolean;
  /** Told when this replica gains (true) or loses (false) the controllers' lease. */
  onLeadership(listener: (leading: boolean) => void): () => void;
  /** A runner's link is attached (and reconciled) here: commands for it from other replicas come here. */
  linkAttached(runnerId: string): Promise<void>;
  /** The link of a runner attached here was lost or superseded. */
  linkDetached(runnerId: string): Promise<void>;
  /** Runners attached to another live replica (as last read), by runner id. */
  remoteLinks(): ReadonlyMap<string, RemoteLink>;
  /** Read the links again now (before a decision that a stale view would get wrong). */
  refreshLinks(): Promise<void>;
  /** Run a command on the replica a runner is attached to; never throws. */
  forward(replicaId: string, forwarded: ForwardedCommand): Promise<Outcome<unknown>>;
  /** Where commands forwarded to this replica run (the hub's local links). */
  serveForwarded(handler: ForwardedCommandHandler): void;
  /**
   * Frames were written here: publish them (and those of the other replicas) to this replica's
   * followers. Undefined for one replica alone, whose journal publishes what it writes itself.
   */
  readonly frames?: FrameFanout;
  close(): Promise<void>;
}

/** Frames written on any replica reach every replica's bus, in the store's order. */
export interface FrameFanout {
  /** This replica wrote frames: read them back in order and tell the others. */
  written(): void;
}

/** The embedded default: one process, every lock in memory, always the leader, no other replica. */
export function singleReplica(): ReplicaCluster {
  const none = new Map<string, RemoteLink>();
  return {
    replicaId: "single",
    shared: false,
    locks: processLocks,
    leads: () => true,
    onLeadership: () => () => {},
    linkAttached: async () => {},
    linkDetached: async () => {},
    remoteLinks: () => none,
    refreshLinks: async () => {},
    forward: async () => ({
      ok: false,
      error: { code: "UNAVAILABLE", message: "no other server replica" },
    }),
    serveForwarded: () => {},
    close: async () => {},
  };
}
