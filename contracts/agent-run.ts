import { z } from "zod";
import { ResultRecord, Usage } from "./adapter.ts";
import { API_VERSION } from "./resources.ts";
import { DnsLabel } from "./session-spec.ts";

/**
 * AgentRun: one run of a one-shot (contract v1alpha1) runtime, `POST /v1/namespaces/{ns}/agentruns`.
 * The call runs the runtime to completion and answers with the run and its status; the container
 * exits after the run and is removed (never kept alive as a substitute for a session).
 *
 * Contract v1alpha1 (one-shot), what the runner gives the image's one-shot entry (the runtime's
 * `command`, else the image's entrypoint):
 * - the input in the environment variable `AGENT_INPUT`;
 * - the Agent's allowed credentials and model settings (`MODEL_BASE_URL`, `MODEL_NAME`) in the
 *   environment, a writable `/workspace` and `/tmp` (tmpfs: nothing survives the run);
 * - egress only to the Agent's allowed endpoints.
 * The entry writes its result to stdout (last line: a JSON result record, or plain text) and
 * exits: 0 succeeded, anything else failed.
 */
export const ONE_SHOT_INPUT_ENV = "AGENT_INPUT";
export const AGENT_RUN_KIND = "AgentRun";

export const AgentRunSpec = z.strictObject({
  /** An Agent in the run's namespace, bound to a v1alpha1 runtime. */
  agentRef: DnsLabel,
  input: z
    .string()
    .min(1)
    .max(64 * 1024),
  /** The run is killed after this. @default 300 */
  timeoutSeconds: z.number().int().min(1).max(3_600).default(300),
});
export type AgentRunSpec = z.infer<typeof AgentRunSpec>;

export const AgentRunInput = z.strictObject({
  apiVersion: z.literal(API_VERSION),
  kind: z.literal(AGENT_RUN_KIND),
  metadata: z.object({ name: DnsLabel.optional(), namespace: DnsLabel.optional() }).default({}),
  spec: AgentRunSpec,
});
export type AgentRunInput = z.infer<typeof AgentRunInput>;

export const AgentRunPhase = z.enum(["Succeeded", "Failed"]);

export const AgentRunStatus = z.object({
  phase: AgentRunPhase,
  /** The entry's exit code; null when it was killed (timeout). */
  exitCode: z.number().int().nullable(),
  output: z.string(),
  /** Bytes of the entry's stdout dropped before what the run kept (`output`, the result record); absent when none. */
  outputTruncatedBytes: z.number().int().nonnegative().optional(),
  /**
   * Model tokens of the run: from the runner's model gateway (what the provider reported) when
   * `usageSource` is "gateway", else what the entry's own result record claimed (an older runner).
   */
  usage: Usage,
  /** "gateway": `usage` is the gateway's count, not the agent's claim (which stays in `result`). */
  usageSource: z.literal("gateway").optional(),
  /** The entry's result record, when its last stdout line was one. */
  result: ResultRecord.optional(),
  resolvedImageDigest: z.string().optional(),
  message: z.string().optional(),
  startTime: z.string(),
  completionTime: z.string(),
});
export type AgentRunStatus = z.infer<typeof AgentRunStatus>;

export const AgentRun = z.object({
  apiVersion: z.literal(API_VERSION),
  kind: z.literal(AGENT_RUN_KIND),
  metadata: z.object({ name: DnsLabel, namespace: DnsLabel }),
  spec: AgentRunSpec,
  status: AgentRunStatus,
});
export type AgentRun = z.infer<typeof AgentRun>;
