import { z } from "zod";
import { SessionState } from "./compass.ts";
import { MAX_PAGE_SIZE, PageToken } from "./pagination.ts";
import { RunnerSelector } from "./runners.ts";
import { Workstream } from "./workspace-repo.ts";

/**
 * The lifecycle RPCs at `POST /v1/rpc/{Method}`; field names are the seed's, snake_case.
 * A workspace (container/pod + volume) is provisioned apart from the agent session in it.
 */
const Id = z
  .string()
  .min(1)
  .max(128)
  .regex(/^[A-Za-z0-9._:-]+$/, "letters, digits, '.', '_', ':' and '-' only");
/** `name` (namespace default) or `namespace/name` of an Agent. */
export const AgentRef = z
  .string()
  .regex(
    /^([a-z0-9]([-a-z0-9]*[a-z0-9])?\/)?[a-z0-9]([-a-z0-9]*[a-z0-9])?$/,
    "must be NAME or NAMESPACE/NAME (DNS labels)",
  );

export const ProvisionAgentWorkspaceRequest = z.strictObject({
  agent_ref: AgentRef,
  /**
   * A name, or `{name, repo: {url, ref?, path?, credential?}}`: the workspace is then seeded once
   * with a checkout of that repository (contracts/workspace-repo.ts).
   */
  workstream: Workstream.default(""),
  /**
   * Idempotency key: a retry with the same key returns the first call's workspace. Absent or ""
   * opts out (each call provisions, reusing the agent's workspace for the workstream).
   */
  client_request_id: z.union([Id, z.literal("")]).default(""),
  /**
   * Only runners whose labels include every `key: value` here take a new workspace (none matching:
   * FAILED_PRECONDITION naming the selector). A workspace already placed stays on its runner.
   */
  runner_selector: RunnerSelector.optional(),
});
export const ProvisionAgentWorkspaceResponse = z.object({ container_name: z.string(), created: z.boolean() });

export const StartAgentSessionRequest = z.strictObject({
  container_name: z.string().min(1).max(128),
  resume_session_id: Id.optional(),
});
export const StartAgentSessionResponse = z.object({ session_id: z.string(), state: SessionState });

export const StopAgentSessionRequest = z.strictObject({ session_id: Id });
export const StopAgentSessionResponse = z.object({ session_id: z.string(), state: SessionState });

export const ReloadAgentSessionRequest = z.strictObject({ session_id: Id });
export const ReloadAgentSessionResponse = StartAgentSessionResponse;

/**
 * One session (`session_id`), or a page of every retained one by creation: `page_size` (default
 * 500, at most 1000) after the `page_token` a previous page answered as `next_page_token`.
 */
export const GetAgentStatusRequest = z.strictObject({
  session_id: Id.optional(),
  page_size: z.number().int().min(1).max(MAX_PAGE_SIZE).optional(),
  page_token: PageToken.optional(),
});
export const AgentSessionStatus = z.object({
  session_id: z.string(),
  container_name: z.string(),
  agent_ref: z.string(),
  state: SessionState,
  reason: z.string().optional(),
  runner_id: z.string().optional(),
  updated_at: z.string(),
});
export type AgentSessionStatus = z.infer<typeof AgentSessionStatus>;
export const GetAgentStatusResponse = z.object({
  sessions: z.array(AgentSessionStatus),
  /** The token of the next page; absent on the last one. */
  next_page_token: z.string().optional(),
});

export const SpawnAgentRequest = ProvisionAgentWorkspaceRequest;
export const SpawnAgentResponse = z.object({
  container_name: z.string(),
  session_id: z.string(),
  state: SessionState,
});

export const RemoveAgentWorkspaceRequest = z.strictObject({ container_name: z.string().min(1).max(128) });
export const RemoveAgentWorkspaceResponse = z.object({ container_name: z.string(), removed: z.boolean() });

/** The longest agent command SendAgentMessage relays (the runner's `send` line limit). */
export const MAX_AGENT_MESSAGE_CHARS = 64 * 1024;

/**
 * One command for the agent, written to its stdin as one JSON line (the reference agent reads
 * `{"type":"message","text":"…"}`, `{"type":"crash"}`, `{"type":"flood","count":N}`, …).
 */
export const AgentMessage = z
  .record(z.string(), z.unknown())
  .refine((m) => JSON.stringify(m).length <= MAX_AGENT_MESSAGE_CHARS, {
    message: `must serialize to at most ${MAX_AGENT_MESSAGE_CHARS} characters`,
  });

/**
 * Delivers one command to a session's agent. A STOPPED session is woken first (a start that
 * resumes it; when its container is gone, the workspace is re-provisioned under the same name
 * and the start retried). An ERRORED session is never woken: reload or stop it.
 */
export const SendAgentMessageRequest = z.strictObject({ session_id: Id, message: AgentMessage });
/** How the message reached the agent: `none` (it was READY), `started` or `reprovisioned`. */
export const MessageWake = z.enum(["none", "started", "reprovisioned"]);
export type MessageWake = z.infer<typeof MessageWake>;
export const SendAgentMessageResponse = z.object({
  session_id: z.string(),
  state: SessionState,
  wake: MessageWake,
});

export const Rpc = {
  ProvisionAgentWorkspace: {
    request: ProvisionAgentWorkspaceRequest,
    response: ProvisionAgentWorkspaceResponse,
  },
  StartAgentSession: { request: StartAgentSessionRequest, response: StartAgentSessionResponse },
  StopAgentSession: { request: StopAgentSessionRequest, response: StopAgentSessionResponse },
  ReloadAgentSession: { request: ReloadAgentSessionRequest, response: ReloadAgentSessionResponse },
  GetAgentStatus: { request: GetAgentStatusRequest, response: GetAgentStatusResponse },
  SpawnAgent: { request: SpawnAgentRequest, response: SpawnAgentResponse },
  RemoveAgentWorkspace: { request: RemoveAgentWorkspaceRequest, response: RemoveAgentWorkspaceResponse },
  SendAgentMessage: { request: SendAgentMessageRequest, response: SendAgentMessageResponse },
} as const;
export type RpcMethod = keyof typeof Rpc;
export const RpcMethod = z.enum(Object.keys(Rpc) as [RpcMethod, ...RpcMethod[]]);
