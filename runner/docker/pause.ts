/**
 * The paused tier on Docker: the engine's own freezer (`POST /containers/{id}/pause` and
 * `/unpause`, the cgroup freezer), which keeps every process and all their memory; a frozen
 * container wakes in tens of milliseconds. Nothing here touches the session's stack: a paused
 * container is still the declared container, so a refresh finds no drift.
 */
import type Docker from "dockerode";
import { CodedError } from "../../contracts/errors.ts";

/** Freezes the container; FAILED_PRECONDITION when it does not run. Pausing a paused one is a no-op. */
export async function pauseContainer(docker: Docker, containerName: string): Promise<void> {
  const container = docker.getContainer(containerName);
  const info = await container.inspect().catch(() => undefined);
  if (!info?.State.Running)
    throw new CodedError(
      "FAILED_PRECONDITION",
      `workspace ${containerName} has no running container (the session is stopped); nothing to pause`,
    );
  if (info.State.Paused) return;
  await container.pause();
}

/** True when the engine holds the container frozen (`State.Paused`); false when it is gone. */
export async function containerPaused(docker: Docker, containerName: string): Promise<boolean> {
  const info = await docker
    .getContainer(containerName)
    .inspect()
    .catch(() => undefined);
  return info?.State.Running === true && info.State.Paused === true;
}

/** Thaws the container when it is paused; anything else (running, gone) is left as it is. */
export async function unpauseContainer(docker: Docker, containerName: string): Promise<boolean> {
  const container = docker.getContainer(containerName);
  try {
    await container.unpause();
    return true;
  } catch (error) {
    // 409 "is not paused", 404 gone: nothing to thaw. Anything else is the engine failing.
    const status = (error as { statusCode?: number }).statusCode;
    if (status === 409 || status === 404) return false;
    throw error;
  }
}

/**
 * The container's memory usage in bytes as `docker stats` shows it (usage less the page cache,
 * `GET /containers/{id}/stats?stream=false&one-shot=true`); undefined when the engine gives none.
 * `one-shot`: one sample at once; without it the engine waits for a second sample (~1-2 s, for its
 * CPU figures), and a wake queued behind the pause that asked waited that long.
 */
export async function containerMemoryBytes(
  docker: Docker,
  containerName: string,
): Promise<number | undefined> {
  const stats = (await docker
    .getContainer(containerName)
    .stats({ stream: false, "one-shot": true })
    .catch(() => undefined)) as
    | { memory_stats?: { usage?: number; stats?: Record<string, number | undefined> } }
    | undefined;
  const memory = stats?.memory_stats;
  if (memory?.usage === undefined) return undefined;
  // cgroup v1 counts the page cache in `usage`; docker stats subtracts it (total_inactive_file, cache).
  const cache = memory.stats?.total_inactive_file ?? memory.stats?.inactive_file ?? memory.stats?.cache ?? 0;
  return Math.max(0, memory.usage - cache);
}
