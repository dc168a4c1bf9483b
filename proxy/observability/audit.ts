import type { Usage } from "../../contracts/adapter.ts";
import type { ErrorCode } from "../../contracts/errors.ts";
import type { Logger } from "./log.ts";
import type { Metrics, ProxiedOutcome } from "./metrics.ts";

/**
 * One proxied request, as audited. Carries who asked for what and how it ended; never the
 * request's input, the agent's output, tokens or credentials.
 */
export type AuditRecord = {
  /** The HTTP request id (`x-request-id`), to join with the access log. */
  http_request_id: string | undefined;
  /** The relayed request's id (the adapter's), when known. */
  request_id: string | undefined;
  namespace: string;
  /** The HarnessSession. */
  session: string;
  outcome: ProxiedOutcome;
  /** The error's gRPC code when the request did not succeed. */
  code?: ErrorCode | undefined;
  /** As the adapter recorded it; undefined when no result record came back. */
  usage: Usage | undefined;
  stream: boolean;
  duration_ms: number;
  /** Who asked: the API token's id and name (`admin` for the admin token); never the token. */
  token_id?: string | undefined;
  token_name?: string | undefined;
};

/** The audit hook: call it once per proxied request, when its reply ended. */
export type Audit = (record: AuditRecord) => void;

/**
 * An audit hook writing one `audit` log line per proxied request and counting it in the
 * metrics (requests by outcome, relay latency).
 */
export function createAudit(log: Logger, metrics?: Metrics): Audit {
  return (record) => {
    const usage =
      record.usage === undefined || record.usage === "unavailable"
        ? { usage: record.usage ?? "unavailable" }
        : { input_tokens: record.usage.input_tokens, output_tokens: record.usage.output_tokens };
    log("info", "audit", {
      http_request_id: record.http_request_id,
      request_id: record.request_id,
      namespace: record.namespace,
      session: record.session,
      outcome: record.outcome,
      ...(record.code ? { code: record.code } : {}),
      ...usage,
      stream: record.stream,
      duration_ms: Math.round(record.duration_ms),
      ...(record.token_id !== undefined ? { token_id: record.token_id, token_name: record.token_name } : {}),
    });
    metrics?.recordProxiedRequest(record.outcome, record.stream, record.duration_ms / 1000);
  };
}
