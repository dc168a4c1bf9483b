/**
 * A workspace seeded from a repository (issue 18) on Kubernetes, and its diff: both run by exec
 * in the session pod's `workspace` sidecar (infra/kubernetes/session.ts), the runner's git image
 * with the session volume at /workspace, so nothing is asked of the agent's image and the pod's
 * NetworkPolicy decides what the fetch reaches. The Docker twin is runner/docker/repo-seed.ts.
 *
 * A seed's inputs, credential included, travel on the exec's stdin, so they reach neither a
 * command line nor the API server's audit log. The scripts, their inputs and git's errors are the
 * same on every engine (runner/engine/repo-scripts.ts).
 */
import { WORKSPACE_CONTAINER, WORKSPACE_SCRATCH } from "../../contracts/session-pod.ts";
import type { SessionSpec } from "../../contracts/session-spec.ts";
import {
  DIFF_SCRIPT,
  GIT_BASE_ENV,
  SEED_SCRIPT,
  SEED_TIMEOUT_MS,
  diffFailed,
  diffInputs,
  gitError,
  seedFailed,
  seedInputs,
  seededCommitOf,
} from "../engine/repo-scripts.ts";
import { openStdin, type PodExec } from "./exec.ts";

/** Reads `n` lines of NAME=value from stdin into the environment, then runs the seed. */
const SEED_FROM_STDIN = `read -r n || exit 1
i=0; while [ "$i" -lt "$n" ]; do IFS= read -r kv || exit 1; export "$kv"; i=$((i + 1)); done
${SEED_SCRIPT}`;

/**
 * The name of the workspace's Ready pod with a `workspace` sidecar; FAILED_PRECONDITION without
 * one (runner/kubernetes/workspace-files.ts).
 */
export type SidecarPod = () => Promise<string>;

/**
 * Seeds the workspace from `spec.repo` unless it already was (no-op without a repo), from inside
 * the pod. Resolves to the commit this seed fetched, undefined when it fetched nothing (no repo,
 * or seeded before): the provision returns it, and the server keeps it for the diff.
 * FAILED_PRECONDITION (details.reason RepoCloneFailed) with git's error when the fetch or
 * checkout fails.
 */
export async function seedWorkspaceRepo(
  exec: PodExec,
  sidecarPod: SidecarPod,
  spec: SessionSpec,
  credentials: Record<string, string>,
): Promise<string | undefined> {
  const repo = spec.repo;
  if (!repo) return undefined;
  const { env, secrets } = seedInputs(repo, repo.url, credentials);
  const lines = [...GIT_BASE_ENV.filter((e) => !e.startsWith("HOME=")), ...env];
  const pod = await sidecarPod();
  const stdin = openStdin();
  const run = await exec.stream(pod, WORKSPACE_CONTAINER, ["/bin/sh", "-c", SEED_FROM_STDIN], {
    stdin,
  });
  stdin.write(`${lines.length}\n${lines.join("\n")}\n`);
  // The script's only stdout is its `seeded <commit>` line (bounded all the same).
  let stdout = "";
  run.stdout.on("data", (chunk: Buffer) => {
    if (stdout.length < 1_000) stdout += chunk.toString("utf8");
  });
  let timer: NodeJS.Timeout | undefined;
  const code = await Promise.race([
    run.exit,
    new Promise<"timeout">((resolve) => {
      timer = setTimeout(() => resolve("timeout"), SEED_TIMEOUT_MS);
    }),
  ]).finally(() => clearTimeout(timer));
  if (code === 0) return seededCommitOf(stdout);
  if (code === "timeout") run.close();
  const why =
    code === "timeout"
      ? `timed out after ${SEED_TIMEOUT_MS / 1000} s`
      : gitError(run.stderr(), secrets, repo.url, repo.url) || `exit ${code}`;
  throw seedFailed(repo, why);
}

/**
 * `git diff` of `/workspace/<path>` against `seededCommit` (the commit the server recorded from
 * the seed), untracked files included, streamed. FAILED_PRECONDITION when the path holds no
 * checkout with that commit. Needs a Ready pod: a stopped session is FAILED_PRECONDITION, as for
 * the files.
 */
export async function workspaceRepoDiff(
  exec: PodExec,
  sidecarPod: SidecarPod,
  containerName: string,
  path: string,
  seededCommit: string,
  signal?: AbortSignal,
): Promise<AsyncIterable<Buffer>> {
  const env = diffInputs(path, seededCommit);
  const pod = await sidecarPod();
  const run = await exec.stream(pod, WORKSPACE_CONTAINER, [
    "env",
    ...env,
    `DIFF_SCRATCH=${WORKSPACE_SCRATCH}`,
    "/bin/sh",
    "-c",
    DIFF_SCRIPT,
  ]);
  // Past the runner command's deadline (or cancelled) the exec ends, and its output with it.
  signal?.addEventListener("abort", () => run.close(), { once: true });
  return (async function* () {
    try {
      for await (const chunk of run.stdout) yield chunk as Buffer;
    } finally {
      run.close();
    }
    const code = await run.exit;
    if (code !== 0) throw diffFailed(code, run.stderr(), containerName, path, seededCommit);
  })();
}
