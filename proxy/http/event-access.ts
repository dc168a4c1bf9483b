import { parseAgentRef } from "../../contracts/resources.ts";
import { harnessWorkstream } from "../harness/harness-reconciler.ts";
import type { Store } from "../store/store.ts";
import type { Principal } from "./api-tokens.ts";

/** Whether a caller may see one agent session's frames. */
export type SessionVisibility = (sessionId: string) => Promise<boolean>;

/**
 * What `/v1/events` shows a caller (contracts/access.ts): `admin` everything (undefined: no
 * filter); a namespace token the sessions of its namespaces' Agents; a session token the agent
 * sessions of its HarnessSession (the workspace of workstream `harness-<name>`, across restarts).
 * Unknown sessions are invisible, so "not yours" and "not there" are one answer.
 */
export function sessionVisibility(store: Store, principal: Principal): SessionVisibility | undefined {
  if (principal.scopes.some((s) => s.kind === "admin")) return undefined;
  const namespaces = new Set<string>();
  const harnessSessions = new Set<string>();
  for (const scope of principal.scopes) {
    if (scope.kind === "namespace") namespaces.add(scope.namespace);
    if (scope.kind === "session") harnessSessions.add(`${scope.namespace}/${harnessWorkstream(scope.name)}`);
  }
  return async (sessionId) => {
    const session = await store.getSession(sessionId);
    if (!session) return false;
    const { namespace } = parseAgentRef(session.agent_ref);
    if (namespaces.has(namespace)) return true;
    if (harnessSessions.size === 0) return false;
    const workspace = await store.getWorkspace(session.container_name);
    return workspace !== undefined && harnessSessions.has(`${namespace}/${workspace.workstream}`);
  };
}
