import type Docker from "dockerode";
import type { LogLine } from "../../contracts/session-logs.ts";
import { timestampedLines } from "../engine/workload-log-lines.ts";

/**
 * The session container's own output as dockerd keeps it (`docker logs --timestamps --tail N`):
 * the adapter's or harness's stdout and stderr, also of a container that has exited. Empty when
 * the container is gone.
 */
export async function dockerWorkloadLogs(
  docker: Docker,
  containerName: string,
  options: { tailLines: number; sinceTime?: string | undefined },
): Promise<LogLine[]> {
  let raw: Buffer;
  try {
    raw = (await docker.getContainer(containerName).logs({
      stdout: true,
      stderr: true,
      timestamps: true,
      follow: false,
      tail: options.tailLines,
      ...(options.sinceTime ? { since: Math.floor(Date.parse(options.sinceTime) / 1000) } : {}),
    })) as unknown as Buffer;
  } catch (error) {
    if ((error as { statusCode?: number }).statusCode === 404) return [];
    throw error;
  }
  return demux(raw);
}

/**
 * A non-TTY container's log is multiplexed: frames of an 8-byte header (stream 1 stdout, 2
 * stderr; big-endian length at 4) then the bytes (Docker Engine API, "Attach to a container").
 */
function demux(raw: Buffer): LogLine[] {
  const now = new Date().toISOString();
  const text = { stdout: "", stderr: "" };
  let offset = 0;
  while (offset + 8 <= raw.length) {
    const kind = raw[offset];
    const length = raw.readUInt32BE(offset + 4);
    const body = raw.subarray(offset + 8, offset + 8 + length).toString("utf8");
    if (kind === 2) text.stderr += body;
    else text.stdout += body;
    offset += 8 + length;
  }
  return [
    ...timestampedLines(text.stdout, "stdout", now),
    ...timestampedLines(text.stderr, "stderr", now),
  ].sort((a, b) => (a.ts < b.ts ? -1 : a.ts > b.ts ? 1 : 0));
}
