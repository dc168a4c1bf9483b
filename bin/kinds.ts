import { UsageError } from "./cli-context.ts";
import type { ResourcePlural } from "../client/resource-kinds.ts";

/** What `get`, `describe` and `delete` take as KIND. `sessions` are agent sessions (GetAgentStatus). */
export type CliKind = ResourcePlural | "sessions";

const ALIASES: Record<string, CliKind> = {
  agentruntimes: "agentruntimes",
  agentruntime: "agentruntimes",
  art: "agentruntimes",
  agents: "agents",
  agent: "agents",
  mcpservers: "mcpservers",
  mcpserver: "mcpservers",
  mcp: "mcpservers",
  skillpacks: "skillpacks",
  skillpack: "skillpacks",
  sp: "skillpacks",
  harnesssessions: "harnesssessions",
  harnesssession: "harnesssessions",
  hs: "harnesssessions",
  sessions: "sessions",
  session: "sessions",
  sessionsnapshots: "sessionsnapshots",
  sessionsnapshot: "sessionsnapshots",
  snapshots: "sessionsnapshots",
  snapshot: "sessionsnapshots",
  snap: "sessionsnapshots",
  webhooks: "webhooks",
  webhook: "webhooks",
  wh: "webhooks",
};

export const KIND_NAMES =
  "agentruntimes (art), agents, mcpservers (mcp), skillpacks (sp), harnesssessions (hs), sessionsnapshots (snapshots), webhooks (wh), sessions";

/** The kind a KIND argument names (any case, singular, plural or short). */
export function parseKind(text: string): CliKind {
  const kind = ALIASES[text.toLowerCase()];
  if (!kind) throw new UsageError(`unknown kind ${text}; one of ${KIND_NAMES}`);
  return kind;
}

/** `agent/alice`, as kubectl names objects in its messages. */
export function objectRef(plural: CliKind, name: string): string {
  const singular = {
    agentruntimes: "agentruntime",
    agents: "agent",
    mcpservers: "mcpserver",
    skillpacks: "skillpack",
    harnesssessions: "harnesssession",
    sessionsnapshots: "sessionsnapshot",
    webhooks: "webhook",
    sessions: "session",
  }[plural];
  return `${singular}/${name}`;
}
