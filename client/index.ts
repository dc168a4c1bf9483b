/** The typed TypeScript client of the agent-sessions HTTP API; depends on `contracts/` only. */
export {
  AgentSessionsClient,
  type ClientOptions,
  type EventMessage,
  type EventsOptions,
  type RpcRequest,
  type RpcResponse,
  type SendOptions,
  type SessionLogsOptions,
} from "./client.ts";
export { ClientError } from "./client-error.ts";
export {
  KIND_OF_PLURAL,
  type ListPage,
  type ManifestKind,
  PLURAL_OF_KIND,
  type ResourceList,
  type ResourcePlural,
  type ResourceTypes,
} from "./resource-kinds.ts";
export { readSse, type SseMessage } from "./sse.ts";
export { type WaitForOptions, waitFor } from "./wait-for.ts";
export type { EventFrame, Frame } from "../contracts/compass.ts";
export type { HarnessPhase, HarnessSession } from "../contracts/harness-session.ts";
export type { Agent, AgentRuntime } from "../contracts/resources.ts";
export type { LogLine, SessionLogsReply } from "../contracts/session-logs.ts";
