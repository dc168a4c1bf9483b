import { CodedError } from "../../contracts/errors.ts";
import { SESSION_SNAPSHOT_KIND, type SessionSnapshot } from "../../contracts/session-snapshot.ts";
import type { Store } from "../store/store.ts";

/**
 * The snapshot `name` of `namespace` a fork (`spec.source.snapshotRef`) or a restore may use: it
 * exists, is Ready, and was taken of `agentRef` on `runtimeRef` (undefined: not checked); else
 * INVALID_ARGUMENT naming `field` and the mismatch. Another namespace's snapshot is never looked
 * at: a name is always of the session's namespace.
 */
export async function usableSnapshot(
  store: Pick<Store, "getResource">,
  namespace: string,
  name: string,
  agentRef: string,
  runtimeRef: string | undefined,
  field: string,
): Promise<SessionSnapshot> {
  const refuse = (description: string) =>
    new CodedError("INVALID_ARGUMENT", `${field}: ${description}`, {
      field_violations: [{ field, description }],
    });
  const snapshot = await store.getResource(SESSION_SNAPSHOT_KIND, namespace, name);
  if (!snapshot)
    throw refuse(
      `${SESSION_SNAPSHOT_KIND} ${namespace}/${name} not found (a snapshot is used in its own namespace only)`,
    );
  if (snapshot.status.phase !== "Ready")
    throw refuse(`${SESSION_SNAPSHOT_KIND} ${namespace}/${name} is ${snapshot.status.phase}, not Ready`);
  if (snapshot.spec.agentRef !== agentRef)
    throw refuse(
      `${SESSION_SNAPSHOT_KIND} ${namespace}/${name} was taken of Agent ${snapshot.spec.agentRef}, not ${agentRef}: a snapshot seeds sessions of its own Agent`,
    );
  if (runtimeRef !== undefined && snapshot.spec.runtimeRef !== runtimeRef)
    throw refuse(
      `${SESSION_SNAPSHOT_KIND} ${namespace}/${name} was taken on runtime ${snapshot.spec.runtimeRef}, not ${runtimeRef}: its conversation is that runtime's`,
    );
  return snapshot;
}
