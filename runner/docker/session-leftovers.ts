/**
 * "Removed" means removed (issue 34 item 11): after a workspace's stack is destroyed, whatever of
 * the session is still on the engine goes too. A stack does not hold everything the runner made:
 * the fast path makes a container at once and records it in the stack afterwards, so a runner
 * killed before the recording (kill -9, a crash) leaves a container, with its credentials, that
 * the stack's destroy never sees. The session's labels find them all.
 */
import type Docker from "dockerode";
import { Labels } from "../../contracts/session-spec.ts";

/** The label filter that finds every engine object of a session. */
function sessionFilters(session: { namespace: string; name: string }): string {
  return JSON.stringify({
    label: [
      `${Labels.managedBy}=agent-sessions`,
      `${Labels.namespace}=${session.namespace}`,
      `${Labels.session}=${session.name}`,
    ],
  });
}

/** Force-removes the session's containers (its volumes and networks stay); returns what it removed. */
export async function removeSessionContainers(
  docker: Docker,
  session: { namespace: string; name: string },
): Promise<string[]> {
  const removed: string[] = [];
  for (const c of await docker.listContainers({ all: true, filters: sessionFilters(session) })) {
    await docker.getContainer(c.Id).remove({ force: true, v: false });
    removed.push(`container ${c.Names?.[0]?.replace(/^\//, "") ?? c.Id}`);
  }
  return removed;
}

/** Force-removes the session's containers, then its volumes and networks; returns what it removed. */
export async function removeSessionLeftovers(
  docker: Docker,
  session: { namespace: string; name: string },
): Promise<string[]> {
  const filters = sessionFilters(session);
  // Containers first: a volume or network in use cannot go.
  const removed = await removeSessionContainers(docker, session);
  for (const v of (await docker.listVolumes({ filters })).Volumes ?? []) {
    await docker.getVolume(v.Name).remove();
    removed.push(`volume ${v.Name}`);
  }
  for (const n of await docker.listNetworks({ filters })) {
    await docker.getNetwork(n.Id).remove();
    removed.push(`network ${n.Name}`);
  }
  return removed;
}

/**
 * A workload container of that name the runner made (labelled as ours) when nothing else of its
 * session is left to find it by (no volume): removed too. False when there is none.
 */
export async function removeOrphanContainer(docker: Docker, containerName: string): Promise<boolean> {
  const container = docker.getContainer(containerName);
  let labels: Record<string, string> | undefined;
  try {
    labels = (await container.inspect()).Config?.Labels ?? undefined;
  } catch (e) {
    if ((e as { statusCode?: number }).statusCode === 404) return false;
    throw e;
  }
  if (labels?.[Labels.managedBy] !== "agent-sessions") return false;
  await container.remove({ force: true });
  return true;
}
