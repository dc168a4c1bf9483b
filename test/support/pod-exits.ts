/**
 * Exits of session pods' adapter containers as the API server saw them, for an engine probe on a
 * cluster whose runtime keeps no history: on the 1.35 test bed containerd removes a deleted pod's
 * containers at once (`crictl ps -a` is empty seconds after), and has no event log to ask later
 * as dockerd has. So the probe watches the namespace's pods from its start and keeps every
 * terminated state of an `adapter` container the kubelet reported (its last status update comes
 * before the pod object goes).
 */
import { KubeConfig, type V1Pod, Watch } from "@kubernetes/client-node";
import { ADAPTER_CONTAINER } from "../../contracts/session-pod.ts";

export type PodExit = { pod: string; exitCode: number; finishedAt: number };

export class PodExits {
  readonly #seen = new Map<string, PodExit>();
  #controller: AbortController | undefined;
  #stopped = false;

  /** Starts watching `namespace`'s pods; resolves once the watch is open. */
  static async watch(namespace: string): Promise<PodExits> {
    const exits = new PodExits();
    const kc = new KubeConfig();
    kc.loadFromFile(process.env.KUBECONFIG ?? "");
    const subscribe = async (): Promise<void> => {
      if (exits.#stopped) return;
      exits.#controller = await new Watch(kc).watch(
        `/api/v1/namespaces/${namespace}/pods`,
        { timeoutSeconds: 25 },
        (_type: string, pod: V1Pod) => exits.#observe(pod),
        // Ended by the server (timeoutSeconds) or an error: open it again. Missed updates in
        // between are read from the list the new watch starts with (ADDED of every live pod).
        () => {
          if (!exits.#stopped) setTimeout(() => subscribe().catch(() => undefined), 100);
        },
      );
    };
    await subscribe();
    return exits;
  }

  /** Exit codes of adapter containers of pods whose name starts with `podPrefix`, ended at or after `sinceMs`. */
  since(podPrefix: string, sinceMs: number): number[] {
    return [...this.#seen.values()]
      .filter((e) => e.pod.startsWith(podPrefix) && e.finishedAt >= sinceMs)
      .sort((a, b) => a.finishedAt - b.finishedAt)
      .map((e) => e.exitCode);
  }

  close(): void {
    this.#stopped = true;
    this.#controller?.abort();
  }

  #observe(pod: V1Pod): void {
    const name = pod.metadata?.name ?? "";
    for (const status of pod.status?.containerStatuses ?? []) {
      if (status.name !== ADAPTER_CONTAINER) continue;
      for (const terminated of [status.state?.terminated, status.lastState?.terminated]) {
        if (!terminated?.finishedAt) continue;
        const finishedAt = new Date(terminated.finishedAt).getTime();
        // One entry per container run: the same exit reported again (later updates, DELETED) counts once.
        this.#seen.set(`${pod.metadata?.uid}/${terminated.containerID ?? finishedAt}`, {
          pod: name,
          exitCode: terminated.exitCode,
          finishedAt,
        });
      }
    }
  }
}
