/**
 * The PostgreSQL schema, as versioned migrations applied in order at open (postgres-database.ts
 * records each in `schema_migrations`). Never edit a released migration: add the next one.
 *
 * Text is `COLLATE "C"` throughout: the stores compare and order by it (keyset pages, the
 * `ns/` ≤ agent_ref < `ns0` namespace ranges, ISO timestamps), and only byte order is the same on
 * every server and the same as SQLite's. Timestamps stay ISO text as in SQLite, so both stores
 * return the same strings.
 */
export type PostgresMigration = { version: number; name: string; sql: string };

const T = 'text COLLATE "C"';

export const POSTGRES_MIGRATIONS: readonly PostgresMigration[] = [
  {
    version: 1,
    name: "store: resources, runners, credentials, workspaces, idempotency keys, sessions, frames",
    sql: `
CREATE TABLE resources (
  kind ${T} NOT NULL, namespace ${T} NOT NULL, name ${T} NOT NULL,
  body ${T} NOT NULL, created_at ${T} NOT NULL, updated_at ${T} NOT NULL,
  PRIMARY KEY (kind, namespace, name)
);
CREATE TABLE runners (
  runner_id ${T} PRIMARY KEY, runner_name ${T} NOT NULL UNIQUE, engine ${T} NOT NULL,
  capacity integer NOT NULL, labels ${T} NOT NULL, last_seen_at ${T} NOT NULL,
  draining boolean NOT NULL DEFAULT false
);
CREATE TABLE runner_credentials (
  runner_name ${T} PRIMARY KEY, token_hash ${T} NOT NULL UNIQUE, created_at ${T} NOT NULL
);
CREATE TABLE workspaces (
  container_name ${T} PRIMARY KEY, agent_ref ${T} NOT NULL, workstream ${T} NOT NULL,
  client_request_id ${T} NOT NULL UNIQUE, runner_id ${T} NOT NULL, status ${T} NOT NULL,
  endpoint ${T}, spec ${T} NOT NULL, adapter_token ${T} NOT NULL,
  created_at ${T} NOT NULL, updated_at ${T} NOT NULL,
  UNIQUE (agent_ref, workstream)
);
CREATE TABLE idempotency_keys (
  scope ${T} NOT NULL, key ${T} NOT NULL, fingerprint ${T} NOT NULL, container_name ${T} NOT NULL,
  created_at ${T} NOT NULL, PRIMARY KEY (scope, key)
);
CREATE TABLE sessions (
  session_id ${T} PRIMARY KEY, container_name ${T} NOT NULL, agent_ref ${T} NOT NULL,
  state ${T} NOT NULL, reason ${T}, runner_id ${T} NOT NULL, last_seq bigint NOT NULL DEFAULT 0,
  created_at ${T} NOT NULL, updated_at ${T} NOT NULL
);
CREATE INDEX workspaces_by_runner ON workspaces (runner_id);
CREATE INDEX idempotency_keys_by_container ON idempotency_keys (container_name);
CREATE INDEX sessions_by_container ON sessions (container_name);
CREATE INDEX sessions_by_runner ON sessions (runner_id);
CREATE INDEX sessions_by_agent ON sessions (agent_ref);
CREATE INDEX sessions_by_creation ON sessions (created_at, session_id);
CREATE TABLE frames (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, session_id ${T} NOT NULL, seq bigint NOT NULL,
  body ${T} NOT NULL, UNIQUE (session_id, seq)
);
`,
  },
  {
    version: 2,
    name: "harness store: harness_sessions, harness_requests",
    sql: `
CREATE TABLE harness_sessions (
  namespace ${T} NOT NULL, name ${T} NOT NULL, uid ${T} NOT NULL,
  spec ${T} NOT NULL, generation bigint NOT NULL,
  created_at ${T} NOT NULL, updated_at ${T} NOT NULL, deletion_requested_at ${T},
  observed_generation bigint NOT NULL DEFAULT 0,
  phase ${T} NOT NULL DEFAULT 'Pending', conditions ${T} NOT NULL DEFAULT '[]',
  container_name ${T}, session_id ${T}, resolved_image_digest ${T},
  last_activity_time ${T},
  request_count bigint NOT NULL DEFAULT 0, active_requests bigint NOT NULL DEFAULT 0,
  error_count bigint NOT NULL DEFAULT 0,
  last_request_id ${T}, last_request_outcome ${T}, last_request_usage ${T},
  input_tokens bigint NOT NULL DEFAULT 0, output_tokens bigint NOT NULL DEFAULT 0,
  usage_reported bigint NOT NULL DEFAULT 0, usage_unavailable bigint NOT NULL DEFAULT 0,
  restart_count bigint NOT NULL DEFAULT 0, consecutive_restarts bigint NOT NULL DEFAULT 0,
  restart_at ${T}, last_exit ${T},
  PRIMARY KEY (namespace, name)
);
CREATE INDEX harness_sessions_by_session ON harness_sessions (session_id);
CREATE INDEX harness_sessions_idle ON harness_sessions
  (phase, ((spec::jsonb ->> 'idleTimeout') COLLATE "C"), last_activity_time);
CREATE INDEX harness_sessions_unsettled ON harness_sessions (namespace, name)
  WHERE deletion_requested_at IS NULL AND (phase IN ('Pending', 'Draining') OR observed_generation < generation);
CREATE TABLE harness_requests (
  namespace ${T} NOT NULL, name ${T} NOT NULL, request_id ${T} NOT NULL,
  relay_id ${T} NOT NULL, runner_id ${T} NOT NULL, container_name ${T} NOT NULL,
  started_at ${T} NOT NULL, finished_at ${T}, outcome ${T}, cancel_requested_at ${T},
  PRIMARY KEY (namespace, name, request_id)
);
CREATE INDEX harness_requests_in_flight ON harness_requests (finished_at, started_at);
`,
  },
  {
    version: 3,
    name: "token store: api_tokens",
    sql: `
CREATE TABLE api_tokens (
  id ${T} PRIMARY KEY, name ${T} NOT NULL UNIQUE, token_hash ${T} NOT NULL UNIQUE,
  scopes ${T} NOT NULL, created_at ${T} NOT NULL, expires_at ${T}
);
`,
  },
  {
    version: 4,
    name: "replicas: liveness, runner links, mailbox",
    sql: `
CREATE TABLE replicas (
  replica_id ${T} PRIMARY KEY, started_at timestamptz NOT NULL DEFAULT now(),
  heartbeat_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE runner_links (
  runner_id ${T} PRIMARY KEY, replica_id ${T} NOT NULL, attached_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE replica_messages (
  id bigserial PRIMARY KEY, to_replica ${T} NOT NULL, body text NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX replica_messages_to ON replica_messages (to_replica, id);
`,
  },
  {
    version: 5,
    name: "token store: chat tokens bound to their session's uid (issue 34)",
    sql: `ALTER TABLE api_tokens ADD COLUMN session_uids ${T};`,
  },
  {
    version: 6,
    name: "harness store: usage the runner's model gateway reported (issue 35)",
    sql: `
ALTER TABLE harness_sessions
  ADD COLUMN gateway_input_tokens bigint NOT NULL DEFAULT 0,
  ADD COLUMN gateway_output_tokens bigint NOT NULL DEFAULT 0,
  ADD COLUMN gateway_reported bigint NOT NULL DEFAULT 0,
  ADD COLUMN gateway_unavailable bigint NOT NULL DEFAULT 0;
CREATE INDEX harness_sessions_by_container ON harness_sessions (container_name);
`,
  },
  {
    version: 7,
    name: "store: the commit each workspace was seeded at, the diff's baseline (issue 34 item 12)",
    sql: `ALTER TABLE workspaces ADD COLUMN seeded_commit ${T};`,
  },
  {
    version: 8,
    name: "store: the snapshot storage a fork's workspace was seeded from (issue 38)",
    sql: `ALTER TABLE workspaces ADD COLUMN seeded_snapshot ${T};`,
  },
];
