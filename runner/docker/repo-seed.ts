/**
 * A workspace seeded from a repository (issue 18) on Docker, and its diff. Session images need
 * not have git (the reference image is `FROM scratch`): both run in a short-lived container of the
 * runner's git image (digest-pinned, AGENT_SESSIONS_GIT_IMAGE; the test bed's base image), hardened
 * like a session's (non-root 65532, read-only root, capabilities dropped, no-new-privileges, no
 * host mounts), with only the session volume mounted and a tmpfs /tmp. The seed runs on the
 * session's own network, so it reaches exactly what the Agent's egress allows (through the
 * network's gateway, infra/docker/provider/host-isolation.ts); the diff runs with no network and
 * the volume read-only. The container is removed whatever happened.
 *
 * The scripts, their inputs and git's errors are the same on every engine (repo-scripts.ts).
 */
import { randomBytes } from "node:crypto";
import type Docker from "dockerode";
import { Labels, type SessionSpec, workloadName } from "../../contracts/session-spec.ts";
import { viaGateway } from "../../infra/docker/provider/gateway-url.ts";
import { networkGateway } from "../../infra/docker/provider/session-container.ts";
import {
  DIFF_SCRIPT,
  GIT_BASE_ENV,
  SEED_SCRIPT,
  SEED_TIMEOUT_MS,
  diffFailed,
  diffInputs,
  gitError,
  noGitImage,
  seedFailed,
  seedInputs,
  seededCommitOf,
} from "../engine/repo-scripts.ts";
import { type ShortLivedRun, shortLivedHostConfig, startShortLived } from "./short-lived-container.ts";

/** The seed's stdout kept: its one `seeded <commit>` line. */
const MAX_STDOUT_CHARS = 1_000;

export type GitContainer = {
  image: string;
  /** The session's workload name (its volume is `<base>-workspace`). */
  base: string;
  script: string;
  env: string[];
  network: string;
  readOnly: boolean;
};

export function gitContainerOptions(g: GitContainer): Docker.ContainerCreateOptions {
  const base = g.base;
  return {
    name: `${base}-git-${randomBytes(3).toString("hex")}`,
    Image: g.image,
    Entrypoint: ["/bin/sh", "-c", g.script],
    Cmd: [],
    User: "65532:65532",
    WorkingDir: "/tmp",
    Env: [...GIT_BASE_ENV, ...g.env],
    Labels: { [Labels.managedBy]: "agent-sessions" },
    HostConfig: shortLivedHostConfig({
      network: g.network,
      mounts: [{ Type: "volume", Source: `${base}-workspace`, Target: "/workspace", ReadOnly: g.readOnly }],
      tmpMiB: 256,
      memoryMiB: 256,
      pids: 128,
    }),
  };
}

/** Starts the container with stdout streamed and stderr collected (bounded); `exit` is its status. */
export function runGit(docker: Docker, g: GitContainer): Promise<ShortLivedRun> {
  return startShortLived(docker, gitContainerOptions(g));
}

/**
 * Seeds the session volume from `spec.repo` unless it already was (no-op without a repo).
 * Resolves to the commit this seed fetched, undefined when it fetched nothing (no repo, or seeded
 * before): the provision returns it, and the server keeps it for the diff.
 * FAILED_PRECONDITION (details.reason RepoCloneFailed) with git's error when the fetch or checkout fails.
 */
export async function seedWorkspaceRepo(
  docker: Docker,
  gitImage: string | undefined,
  spec: SessionSpec,
  credentials: Record<string, string>,
): Promise<string | undefined> {
  const repo = spec.repo;
  if (!repo) return undefined;
  if (!gitImage) throw noGitImage("seed a workspace from a repository");
  const base = workloadName(spec.namespace, spec.name);
  const network = `${base}-net`;
  const gatewayUrl = viaGateway(repo.url, spec.egress, await networkGateway(docker, network));
  // Given to the engine at create time only (never on a command line).
  const { env, secrets } = seedInputs(repo, gatewayUrl, credentials);
  const run = await runGit(docker, {
    image: gitImage,
    base,
    script: SEED_SCRIPT,
    env,
    network,
    readOnly: false,
  });
  try {
    // The script's only stdout is its `seeded <commit>` line (bounded all the same).
    let stdout = "";
    run.stdout.on("data", (chunk: Buffer) => {
      if (stdout.length < MAX_STDOUT_CHARS) stdout += chunk.toString("utf8");
    });
    let timer: NodeJS.Timeout | undefined;
    const code = await Promise.race([
      run.exit,
      new Promise<number>((resolve) => {
        timer = setTimeout(() => resolve(-1), SEED_TIMEOUT_MS);
      }),
    ]).finally(() => clearTimeout(timer));
    if (code === 0) return seededCommitOf(stdout);
    const why =
      code === -1
        ? `timed out after ${SEED_TIMEOUT_MS / 1000} s`
        : gitError(run.stderr(), secrets, gatewayUrl, repo.url) || `exit ${code}`;
    throw seedFailed(repo, why);
  } finally {
    await run.remove();
  }
}

/**
 * `git diff` of `/workspace/<path>` against `seededCommit` (the commit the server recorded from
 * the seed), untracked files included, streamed. FAILED_PRECONDITION when the path holds no
 * checkout with that commit. Works with the session stopped too (only the volume is needed).
 */
export async function workspaceRepoDiff(
  docker: Docker,
  gitImage: string | undefined,
  containerName: string,
  path: string,
  seededCommit: string,
  signal?: AbortSignal,
): Promise<AsyncIterable<Buffer>> {
  if (!gitImage) throw noGitImage("diff a workspace");
  const env = diffInputs(path, seededCommit);
  const run = await runGit(docker, {
    image: gitImage,
    base: containerName,
    script: DIFF_SCRIPT,
    env: [...env, "DIFF_SCRATCH=/tmp"],
    network: "none",
    readOnly: true,
  });
  // Past the command's deadline (or cancelled) the container goes, which ends its output.
  const stop = () => void run.remove();
  if (signal?.aborted) stop();
  signal?.addEventListener("abort", stop, { once: true });
  return (async function* () {
    try {
      for await (const chunk of run.stdout) yield chunk as Buffer;
      const code = await run.exit;
      if (code !== 0) throw diffFailed(code, run.stderr(), containerName, path, seededCommit);
    } finally {
      signal?.removeEventListener("abort", stop);
      await run.remove();
    }
  })();
}
