import type { SessionState } from "../../contracts/compass.ts";
import type { SessionSpec } from "../../contracts/session-spec.ts";
import type {
  IdempotencyRecord,
  RelayRoute,
  RunnerRecord,
  SessionRecord,
  WorkspaceRecord,
  WorkspaceStatus,
} from "./store.ts";

/** A row as either database gives it (SQLite's or PostgreSQL's column values). */
export type StoredRow = Record<string, unknown>;

/** NULL (either database) as undefined, anything else as text. */
export function optionalString(value: unknown): string | undefined {
  return value === null || value === undefined ? undefined : String(value);
}

// Rows → records, shared by the SQLite and PostgreSQL stores (same columns in both schemas).

export function toRunner(row: StoredRow): RunnerRecord {
  return {
    runner_id: String(row.runner_id),
    runner_name: String(row.runner_name),
    engine: String(row.engine) as RunnerRecord["engine"],
    capacity: Number(row.capacity),
    labels: JSON.parse(String(row.labels)) as Record<string, string>,
    draining: Number(row.draining) === 1,
    last_seen_at: String(row.last_seen_at),
  };
}

export function toIdempotency(row: StoredRow): IdempotencyRecord {
  return {
    scope: String(row.scope),
    key: String(row.key),
    fingerprint: String(row.fingerprint),
    container_name: String(row.container_name),
    created_at: String(row.created_at),
  };
}

export function toWorkspace(row: StoredRow): WorkspaceRecord {
  return {
    container_name: String(row.container_name),
    agent_ref: String(row.agent_ref),
    workstream: String(row.workstream),
    client_request_id: String(row.client_request_id),
    runner_id: String(row.runner_id),
    status: String(row.status) as WorkspaceStatus,
    endpoint: optionalString(row.endpoint),
    spec: JSON.parse(String(row.spec)) as SessionSpec,
    adapter_token: String(row.adapter_token),
    seeded_commit: optionalString(row.seeded_commit),
    seeded_snapshot: optionalString(row.seeded_snapshot),
    created_at: String(row.created_at),
    updated_at: String(row.updated_at),
  };
}

/** A relay route from a narrow row: `runner_id`, `agent_ref`, `streaming` (JSON true as 1 or true), `protocol`. */
export function toRelayRoute(containerName: string, row: StoredRow): RelayRoute {
  return {
    container_name: containerName,
    runner_id: String(row.runner_id),
    agent_ref: String(row.agent_ref),
    streaming: row.streaming === true || Number(row.streaming) === 1,
    protocol: optionalString(row.protocol) as RelayRoute["protocol"],
  };
}

/** A relay route from a whole workspace record. */
export function relayRouteOf(workspace: WorkspaceRecord): RelayRoute {
  return {
    container_name: workspace.container_name,
    runner_id: workspace.runner_id,
    agent_ref: workspace.agent_ref,
    streaming: workspace.spec.streaming,
    protocol: workspace.spec.session?.protocol,
  };
}

export function toSession(row: StoredRow): SessionRecord {
  return {
    session_id: String(row.session_id),
    container_name: String(row.container_name),
    agent_ref: String(row.agent_ref),
    state: String(row.state) as SessionState,
    reason: optionalString(row.reason),
    runner_id: String(row.runner_id),
    last_seq: Number(row.last_seq),
    created_at: String(row.created_at),
    updated_at: String(row.updated_at),
  };
}
