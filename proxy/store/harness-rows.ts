import type { RequestOutcome, Usage } from "../../contracts/adapter.ts";
import type { Condition, HarnessPhase, HarnessSessionSpec } from "../../contracts/harness-session.ts";
import type { HandledExit, HarnessRecord, HarnessRequestRecord, HarnessServing } from "./harness-store.ts";
import { optionalString, type StoredRow } from "./store-rows.ts";

// Rows → records, shared by the SQLite and PostgreSQL harness stores (same columns in both schemas).

export function toHarnessRecord(row: StoredRow): HarnessRecord {
  const usage = optionalString(row.last_request_usage);
  const lastExit = optionalString(row.last_exit);
  return {
    namespace: String(row.namespace),
    name: String(row.name),
    uid: String(row.uid),
    spec: JSON.parse(String(row.spec)) as HarnessSessionSpec,
    generation: Number(row.generation),
    created_at: String(row.created_at),
    updated_at: String(row.updated_at),
    deletion_requested_at: optionalString(row.deletion_requested_at),
    observed_generation: Number(row.observed_generation),
    phase: String(row.phase) as HarnessPhase,
    conditions: JSON.parse(String(row.conditions)) as Condition[],
    container_name: optionalString(row.container_name),
    session_id: optionalString(row.session_id),
    resolved_image_digest: optionalString(row.resolved_image_digest),
    last_activity_time: optionalString(row.last_activity_time),
    request_count: Number(row.request_count),
    active_requests: Number(row.active_requests),
    error_count: Number(row.error_count),
    last_request_id: optionalString(row.last_request_id),
    last_request_outcome: optionalString(row.last_request_outcome) as RequestOutcome | undefined,
    last_request_usage: usage === undefined ? undefined : (JSON.parse(usage) as Usage),
    input_tokens: Number(row.input_tokens),
    output_tokens: Number(row.output_tokens),
    usage_reported: Number(row.usage_reported),
    usage_unavailable: Number(row.usage_unavailable),
    gateway_input_tokens: Number(row.gateway_input_tokens ?? 0),
    gateway_output_tokens: Number(row.gateway_output_tokens ?? 0),
    gateway_reported: Number(row.gateway_reported ?? 0),
    gateway_unavailable: Number(row.gateway_unavailable ?? 0),
    restart_count: Number(row.restart_count),
    consecutive_restarts: Number(row.consecutive_restarts),
    restart_at: optionalString(row.restart_at),
    last_exit: lastExit === undefined ? undefined : (JSON.parse(lastExit) as HandledExit),
  };
}

export function toHarnessServing(namespace: string, name: string, row: StoredRow): HarnessServing {
  return {
    namespace,
    name,
    phase: String(row.phase) as HarnessPhase,
    container_name: optionalString(row.container_name),
    session_id: optionalString(row.session_id),
  };
}

export function toHarnessRequest(row: StoredRow): HarnessRequestRecord {
  return {
    namespace: String(row.namespace),
    name: String(row.name),
    request_id: String(row.request_id),
    relay_id: String(row.relay_id),
    runner_id: String(row.runner_id),
    container_name: String(row.container_name),
    started_at: String(row.started_at),
    finished_at: optionalString(row.finished_at),
    outcome: optionalString(row.outcome) as RequestOutcome | undefined,
    cancel_requested_at: optionalString(row.cancel_requested_at),
  };
}
