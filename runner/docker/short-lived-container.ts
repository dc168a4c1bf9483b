import { PassThrough, type Duplex } from "node:stream";
import type Docker from "dockerode";
import { CodedError } from "../../contracts/errors.ts";
import { CONTAINER_LOG_CONFIG } from "../../infra/docker/provider/log-limits.ts";

const MiB = 1024 * 1024;

/**
 * The HostConfig of a container the runner starts for one job and removes after (an AgentRun's
 * one-shot, a workspace's git seed or diff): read-only root, no privileges, every capability
 * dropped, no new privileges, bounded memory, CPU and PIDs, never restarted, logs bounded. Only
 * the network and the mounts differ; `/tmp` is always a tmpfs of `tmpMiB`.
 */
export function shortLivedHostConfig(o: {
  network: string;
  mounts: Docker.MountSettings[];
  tmpMiB: number;
  memoryMiB: number;
  pids: number;
}): Docker.HostConfig {
  return {
    ReadonlyRootfs: true,
    Privileged: false,
    CapDrop: ["ALL"],
    SecurityOpt: ["no-new-privileges"],
    NetworkMode: o.network,
    Mounts: [
      ...o.mounts,
      {
        Type: "tmpfs",
        Source: "",
        Target: "/tmp",
        TmpfsOptions: { SizeBytes: o.tmpMiB * MiB, Mode: 0o1777 },
      },
    ],
    Memory: o.memoryMiB * MiB,
    NanoCpus: 1e9,
    PidsLimit: o.pids,
    RestartPolicy: { Name: "no" },
    LogConfig: { Type: CONTAINER_LOG_CONFIG.Type, Config: { ...CONTAINER_LOG_CONFIG.Config } },
  };
}

/** stderr kept of a short-lived container (bounded): its error text for a message. */
const MAX_STDERR_CHARS = 8_000;

/** A started short-lived container: stdout streamed, stderr collected, `stdin` when asked for. */
export type ShortLivedRun = {
  stdout: PassThrough;
  stderr: () => string;
  /** Its exit status. */
  exit: Promise<number>;
  /** Removes it, whatever state it is in; never throws. */
  remove: () => Promise<void>;
  stdin?: Duplex;
};

/** FAILED_PRECONDITION unless the runner's git image is on the engine. */
export async function assertImage(docker: Docker, image: string): Promise<void> {
  try {
    await docker.getImage(image).inspect();
  } catch {
    throw new CodedError("FAILED_PRECONDITION", `the runner's git image ${image} is not on the engine`);
  }
}

/**
 * Creates and starts a container the runner uses for one job (a repository seed or diff, a
 * snapshot copy) from `options`, with its output attached before it starts; FAILED_PRECONDITION
 * when the runner's git image is not on the engine. Removed again if it cannot start.
 */
export async function startShortLived(
  docker: Docker,
  options: Docker.ContainerCreateOptions,
  stdin = false,
): Promise<ShortLivedRun> {
  await assertImage(docker, options.Image ?? "");
  const container = await docker.createContainer(options);
  const remove = () =>
    container.remove({ force: true }).then(
      () => undefined,
      () => undefined,
    );
  try {
    const attached = (await container.attach({
      stream: true,
      stdout: true,
      stderr: true,
      ...(stdin ? { stdin: true, hijack: true } : {}),
    })) as Duplex;
    const stdout = new PassThrough();
    const errors = new PassThrough();
    let errorText = "";
    errors.on("data", (chunk: Buffer) => {
      if (errorText.length < MAX_STDERR_CHARS) errorText += chunk.toString("utf8");
    });
    docker.modem.demuxStream(attached, stdout, errors);
    attached.on("end", () => stdout.end());
    attached.on("close", () => stdout.end());
    await container.start();
    const exit = container.wait().then((r: { StatusCode: number }) => r.StatusCode);
    return { stdout, stderr: () => errorText, exit, remove, ...(stdin ? { stdin: attached } : {}) };
  } catch (error) {
    await remove();
    throw error;
  }
}
