import type { CoreV1Api, V1Pod } from "@kubernetes/client-node";
import { ADAPTER_CONTAINER } from "../../contracts/session-pod.ts";
import type { LogLine } from "../../contracts/session-logs.ts";
import { timestampedLines } from "../engine/workload-log-lines.ts";

/**
 * The adapter container's log as the kubelet keeps it (`kubectl logs --timestamps --tail N`):
 * stdout and stderr together (the kubelet's API does not tell them apart; shown as stdout). After
 * a restart of the container, the previous one's log too, first. Empty without a pod.
 */
export async function podWorkloadLogs(
  core: CoreV1Api,
  namespace: string,
  pod: V1Pod | undefined,
  options: { tailLines: number; sinceTime?: string | undefined },
): Promise<LogLine[]> {
  const name = pod?.metadata?.name;
  if (!name) return [];
  const now = new Date().toISOString();
  const read = async (previous: boolean): Promise<LogLine[]> => {
    try {
      const text = await core.readNamespacedPodLog({
        name,
        namespace,
        container: ADAPTER_CONTAINER,
        timestamps: true,
        tailLines: options.tailLines,
        previous,
        ...(options.sinceTime ? { sinceTime: options.sinceTime } : {}),
      });
      return timestampedLines(String(text), "stdout", now);
    } catch {
      return []; // no previous container, or the pod went away meanwhile
    }
  };
  const restarted = (pod?.status?.containerStatuses ?? []).some(
    (s) => s.name === ADAPTER_CONTAINER && (s.restartCount ?? 0) > 0,
  );
  return [...(restarted ? await read(true) : []), ...(await read(false))];
}
