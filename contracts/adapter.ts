import { z } from "zod";

/**
 * Adapter contract v1alpha2: the HTTP surface of the adapter inside a session container,
 * reached only by the runner. Readiness `/readyz`, liveness `/healthz`, an authenticated request
 * endpoint with bounded body and time, one result record per request, cancellation of one
 * request, graceful shutdown on SIGTERM (drain), streaming only when the runtime declares it.
 */
export const ADAPTER_CONTRACT = "v1alpha2";
export const ADAPTER_PORT = 8080;

/**
 * A request's id: the server gives it, the adapter echoes it in its result record, the audit log
 * records it. Short and log-safe, checked both ways (an adapter's answer is as untrusted as the
 * agent behind it).
 */
export const RequestId = z
  .string()
  .min(1)
  .max(128)
  .regex(/^[A-Za-z0-9._-]+$/, "must be 1-128 of A-Z a-z 0-9 . _ -");

/** A token count: a non-negative integer, at most 10^12 (far above any context, exact as a double). */
const TokenCount = z.number().int().nonnegative().max(1e12);

export const AdapterRequest = z.object({
  id: RequestId,
  input: z
    .string()
    .min(1)
    .max(64 * 1024),
  stream: z.boolean().default(false),
});
export type AdapterRequest = z.infer<typeof AdapterRequest>;

/** Usage as the model reported it, or the explicit value "unavailable" — never a fake zero. */
export const Usage = z.union([
  z.object({ input_tokens: TokenCount, output_tokens: TokenCount }),
  z.literal("unavailable"),
]);
export type Usage = z.infer<typeof Usage>;

/**
 * A request's usage as the runner's model gateway counted it (issue 35): the provider's own
 * numbers, summed over the model calls the gateway relayed for that request. Only the server
 * writes it; an adapter's reply never can (relay-flight.ts overwrites whatever it claimed).
 */
export const GatewayUsage = z.object({
  input_tokens: TokenCount,
  output_tokens: TokenCount,
  source: z.literal("gateway"),
  /** Model calls whose usage the provider reported (the sums cover exactly these). */
  model_calls: z.number().int().positive(),
  /** The model of the last call counted. */
  model: z.string().max(256).optional(),
});
export type GatewayUsage = z.infer<typeof GatewayUsage>;

export const RequestOutcome = z.enum(["succeeded", "failed", "cancelled"]);
export type RequestOutcome = z.infer<typeof RequestOutcome>;

export const ResultRecord = z.object({
  id: RequestId,
  outcome: RequestOutcome,
  /** Bounded by the relay's reply limit (AGENT_SESSIONS_REPLY_MAX_BYTES). */
  output: z.string().optional(),
  error: z
    .string()
    .max(16 * 1024)
    .optional(),
  /**
   * From the adapter: what it claims. In the server's answer: the gateway's count when the
   * gateway saw the request's model calls ("unavailable" when none of them carried usage), else
   * the adapter's claim.
   */
  usage: z.union([GatewayUsage, Usage]),
  /** In the server's answer when the gateway counted the request: what the adapter claimed. */
  claimed_usage: Usage.optional(),
  started_at: z.string().max(64),
  finished_at: z.string().max(64),
});
export type ResultRecord = z.infer<typeof ResultRecord>;

/**
 * One server-sent event of a streamed reply (`data:` lines of JSON). `tool` is sent by runtimes
 * that declare the `tools` capability: a tool call the agent started or finished (its name only,
 * never its arguments or output).
 */
export const StreamEvent = z.discriminatedUnion("type", [
  z.object({ type: z.literal("delta"), text: z.string() }),
  z.object({
    type: z.literal("tool"),
    phase: z.enum(["start", "end"]),
    call_id: z.string().max(256),
    name: z.string().max(256),
    is_error: z.boolean().optional(),
  }),
  z.object({ type: z.literal("result"), result: ResultRecord }),
]);
export type StreamEvent = z.infer<typeof StreamEvent>;
