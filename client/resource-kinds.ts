import type { z } from "zod";
import type { HarnessSession, HarnessSessionInput } from "../contracts/harness-session.ts";
import type {
  Agent,
  AgentInput,
  AgentRuntime,
  AgentRuntimeInput,
  SkillPack,
} from "../contracts/resources.ts";
import type { MCPServerInput, MCPServerView } from "../contracts/mcp.ts";
import type { SessionSnapshot } from "../contracts/session-snapshot.ts";
import type { Webhook, WebhookInput } from "../contracts/webhook.ts";

/** The namespaced kinds of `/v1/namespaces/{ns}/{plural}`: what a PUT takes and a GET returns. */
export type ResourceTypes = {
  agentruntimes: { input: AgentRuntimeInput; output: AgentRuntime };
  agents: { input: AgentInput; output: Agent };
  mcpservers: { input: MCPServerInput; output: MCPServerView };
  /** Markdown skills an Agent's sessions get read-only at /skills (issue 39). */
  skillpacks: { input: z.input<typeof SkillPack>; output: SkillPack };
  harnesssessions: { input: z.input<typeof HarnessSessionInput>; output: HarnessSession };
  /** Made by `…/harnesssessions/{name}:snapshot` or an archive import, never by PUT of a manifest. */
  sessionsnapshots: { input: never; output: SessionSnapshot };
  /** `spec.secret` is write-only: only a create answer may carry it (a generated one, shown once). */
  webhooks: { input: WebhookInput; output: Webhook };
};
export type ResourcePlural = keyof ResourceTypes;

/** `kind` of a manifest → its path segment (the kinds `apply` writes). */
export const PLURAL_OF_KIND = {
  AgentRuntime: "agentruntimes",
  Agent: "agents",
  MCPServer: "mcpservers",
  SkillPack: "skillpacks",
  HarnessSession: "harnesssessions",
  Webhook: "webhooks",
} as const satisfies Record<string, ResourcePlural>;
export type ManifestKind = keyof typeof PLURAL_OF_KIND;

export const KIND_OF_PLURAL: Record<ResourcePlural, ManifestKind | "SessionSnapshot"> = {
  agentruntimes: "AgentRuntime",
  agents: "Agent",
  mcpservers: "MCPServer",
  skillpacks: "SkillPack",
  harnesssessions: "HarnessSession",
  sessionsnapshots: "SessionSnapshot",
  webhooks: "Webhook",
};

/** A list answer: `{apiVersion, kind: "<Kind>List", metadata: {continue?}, items}` (one page). */
export type ResourceList<T> = {
  apiVersion: string;
  kind: string;
  metadata?: { continue?: string };
  items: T[];
};
/** Which page of a list: at most `limit` items after the `continue` token of the previous one. */
export type ListPage = { limit?: number; continue?: string };
