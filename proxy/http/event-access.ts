import { parseAgentRef } from "../../contracts/resources.ts";
import { harnessWorkstream } from "../harness/harness-reconciler.ts";
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

/**
 * Whom a session's frames are about, as the event stream names it (issue 42): the namespace of
 * its Agent and, for a HarnessSession's agent session (any of its restarts), that HarnessSession's
 * name. `settled` says the answer cannot change any more; an unsettled one (a HarnessSession not
 * yet recorded as owning the container, or gone) is asked again for later frames.
 */
export type SessionLabel = { namespace: string; name?: string | undefined; settled: boolean };

/**
 * The label of an agent session: its workspace's workstream `harness-<name>` names a candidate,
 * which is the session's HarnessSession only when that record names the container (the rule of
 * rpc-access.ts: an RPC workstream called `harness-…` serves no HarnessSession).
 */
export function sessionLabels(
  store: Store,
  harness?: HarnessStore | undefined,
): (sessionId: string) => Promise<SessionLabel | undefined> {
  const prefix = harnessWorkstream("");
  return async (sessionId) => {
    const session = await store.getSession(sessionId);
    if (!session) return undefined;
    const { namespace } = parseAgentRef(session.agent_ref);
    if (!harness) return { namespace, settled: true };
    const workspace = await store.getWorkspace(session.container_name);
    if (!workspace?.workstream.startsWith(prefix)) return { namespace, settled: workspace !== undefined };
    const name = workspace.workstream.slice(prefix.length);
    const record = await harness.getHarnessSession(namespace, name);
    if (record && (record.container_name === session.container_name || record.session_id === sessionId))
      return { namespace, name, settled: true };
    return { namespace, settled: record?.container_name !== undefined };
  };
}
