import { parseAgentRef } from "../../contracts/resources.ts";
import type { HarnessStore } from "../store/harness-store.ts";
import type { Store } from "../store/store.ts";
import type { Principal } from "./api-tokens.ts";

/** Whether a caller may see one agent session's frames. */
export type SessionVisibility = (sessionId: string) => Promise<boolean>;

/**
 * What `/v1/events` shows a caller (contracts/access.ts): `admin` everything (undefined: no
 * filter); a namespace token the sessions of its namespaces' Agents; a session token the agent
 * sessions of its HarnessSession only: its current `session_id`, and any earlier one (across
 * restarts) in the container its record names. A workspace is matched by that record, never by
 * its workstream's name, so another Agent's RPC workspace called `harness-<name>` stays invisible
 * (the RPC routes' rule, rpc-access.ts). Unknown sessions are invisible, so "not yours" and "not
 * there" are one answer.
 */
export function sessionVisibility(
  store: Store,
  principal: Principal,
  harness?: HarnessStore | undefined,
): SessionVisibility | undefined {
  if (principal.scopes.some((s) => s.kind === "admin")) return undefined;
  const namespaces = new Set<string>();
  const harnessSessions: { namespace: string; name: string; uid?: string | undefined }[] = [];
  for (const scope of principal.scopes) {
    if (scope.kind === "namespace") namespaces.add(scope.namespace);
    if (scope.kind === "session") harnessSessions.push(scope);
  }
  return async (sessionId) => {
    const session = await store.getSession(sessionId);
    if (!session) return false;
    const { namespace } = parseAgentRef(session.agent_ref);
    if (namespaces.has(namespace)) return true;
    if (!harness) return false;
    for (const scope of harnessSessions) {
      if (scope.namespace !== namespace) continue;
      const record = await harness.getHarnessSession(scope.namespace, scope.name);
      if (!record || (scope.uid !== undefined && record.uid !== scope.uid)) continue;
      if (record.session_id === sessionId) return true;
      if (record.container_name !== undefined && record.container_name === session.container_name)
        return true;
    }
    return false;
  };
}
