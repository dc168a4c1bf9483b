/**
 * The engine's word on session containers that exited or went (`die`, `oom`, `destroy` events of
 * containers labelled ours), as `onExit(containerName, reason, detail)`.
 *
 * Events name a container, and a session's container name outlives its containers: a stop removes
 * one and a resume makes the next under the same name. Back to back (the fast path answers before
 * the engine's events of the removal are read), an event of the removed container can arrive when
 * its successor already runs; it is about a container the name no longer holds, and never reported
 * (else the running session's agent would be taken for lost). An event is reported only when the
 * name holds no container now, or still the one the event is of.
 */
import type Docker from "dockerode";
import { Labels } from "../../contracts/session-spec.ts";
import type { ExitReason } from "../engine/driver.ts";

/** How long a container's `die` waits for its `destroy` (a removal) before it counts as an exit. */
export const DIE_SETTLE_MS = 500;

type EngineEvent = {
  Action: string;
  id?: string;
  Actor: { ID?: string; Attributes: Record<string, string> };
};

type ContainerNow = { id: string; oomKilled: boolean } | undefined;

/** The container a name holds now (undefined: none), as far as the engine answers. */
async function containerNow(docker: Docker, name: string): Promise<ContainerNow | "unknown"> {
  try {
    const info = await docker.getContainer(name).inspect();
    return { id: info.Id, oomKilled: info.State.OOMKilled };
  } catch (error) {
    return (error as { statusCode?: number }).statusCode === 404 ? undefined : "unknown";
  }
}

export async function watchWorkloadExits(
  docker: Docker,
  onExit: (containerName: string, reason: ExitReason, detail: string) => void,
  options: {
    /** An `oom` event of a container (the driver keeps when, to explain a failed start). */
    onOom?: (containerName: string) => void;
    /** An event about a container its name no longer holds (debug). */
    onStale?: (containerName: string, action: string) => void;
    dieSettleMs?: number;
  } = {},
): Promise<() => void> {
  const settleMs = options.dieSettleMs ?? DIE_SETTLE_MS;
  let stopped = false;
  let current: NodeJS.ReadableStream | undefined;
  /** Reported unless the name now holds another container than `id` (an event's id unknown: reported). */
  const report = async (
    name: string,
    id: string | undefined,
    action: string,
    reported: (now: ContainerNow | "unknown") => void,
  ) => {
    const now = await containerNow(docker, name);
    if (id && now !== undefined && now !== "unknown" && now.id !== id) {
      options.onStale?.(name, action);
      return;
    }
    reported(now);
  };
  const subscribe = async (): Promise<void> => {
    const stream = (await docker.getEvents({
      filters: JSON.stringify({
        type: ["container"],
        event: ["die", "oom", "destroy"],
        label: [`${Labels.managedBy}=agent-sessions`],
      }),
    })) as NodeJS.ReadableStream;
    current = stream;
    const oomed = new Set<string>();
    // `docker rm -f` sends `die` then `destroy`: a `die` waits a moment for a `destroy` of the
    // same container, so a removal is reported as ContainerRemoved, not as an exit.
    const dying = new Map<string, NodeJS.Timeout>();
    let buffer = "";
    stream.on("data", (chunk: Buffer) => {
      buffer += chunk.toString("utf8");
      const lines = buffer.split("\n");
      buffer = lines.pop() ?? "";
      for (const line of lines) {
        if (!line.trim()) continue;
        const ev = JSON.parse(line) as EngineEvent;
        const name = ev.Actor.Attributes.name ?? "";
        const id = ev.Actor.ID ?? ev.id;
        if (ev.Action === "oom") {
          oomed.add(name);
          options.onOom?.(name);
        } else if (ev.Action === "die") {
          const code = ev.Actor.Attributes.exitCode ?? "?";
          const oom = oomed.delete(name);
          clearTimeout(dying.get(name));
          dying.set(
            name,
            setTimeout(() => {
              dying.delete(name);
              // 137 alone is also `docker kill`; the oom event (or OOMKilled) tells them apart.
              void report(name, id, "die", (now) => {
                const oomKilled = oom || (code === "137" && typeof now === "object" && now.oomKilled);
                onExit(name, oomKilled ? "OOMKilled" : "ContainerExited", `exit code ${code}`);
              });
            }, settleMs),
          );
        } else if (ev.Action === "destroy") {
          clearTimeout(dying.get(name));
          dying.delete(name);
          void report(name, id, "destroy", () => onExit(name, "ContainerRemoved", "container removed"));
        }
      }
    });
    stream.once("end", () => {
      if (stopped) return;
      // The engine went away (restart): every container died with it; resubscribe when back.
      onExit("*", "EngineRestarted", "docker engine event stream ended");
      const retry = () => {
        if (!stopped) subscribe().catch(() => setTimeout(retry, 1000));
      };
      setTimeout(retry, 1000);
    });
  };
  await subscribe();
  return () => {
    stopped = true;
    (current as unknown as { destroy?: () => void })?.destroy?.();
  };
}
