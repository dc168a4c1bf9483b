/**
 * A workspace seeded from a repository (issue 18) on Docker, and its diff. Session images need
 * not have git (the reference image is `FROM scratch`): both run in a short-lived container of the
 * runner's git image (digest-pinned, AGENT_SESSIONS_GIT_IMAGE; the test bed's base image), hardened
 * like a session's (non-root 65532, read-only root, capabilities dropped, no-new-privileges, no
 * host mounts), with only the session volume mounted and a tmpfs /tmp. The seed runs on the
 * session's own network, so it reaches exactly what the Agent's egress allows (through the
 * network's gateway, infra/docker-provider/host-isolation.ts); the diff runs with no network and
 * the volume read-only. The container is removed whatever happened.
 *
 * Seeded once: when `/workspace/<path>/.git` exists nothing is fetched (a re-provision or resume
 * never clobbers the agent's changes). The seeded commit is kept as `refs/agent-sessions/seed`;
 * the diff is against it, untracked files included (a throwaway index and object directory in /tmp).
 */
import { randomBytes } from "node:crypto";
import { PassThrough } from "node:stream";
import type Docker from "dockerode";
import { CodedError } from "../contracts/errors.ts";
import { Labels, type SessionSpec, workloadName } from "../contracts/session-spec.ts";
import { redactUrl } from "../contracts/workspace-repo.ts";
import { viaGateway } from "../infra/docker-provider/gateway-url.ts";
import { networkGateway } from "../infra/docker-provider/session-container.ts";
import { shortLivedHostConfig } from "./short-lived-container.ts";

/** The ref the seeded commit is kept under. */
export const SEED_REF = "refs/agent-sessions/seed";
/** Exit status of the diff script when the path holds no seeded checkout. */
const NOT_SEEDED_EXIT = 3;
/** git's error text kept for a message. */
const MAX_ERROR_CHARS = 2_000;
const SEED_TIMEOUT_MS = 120_000;

/** POSIX sh run by the git image's /bin/sh. Inputs come as environment, never spliced in. */
const SEED_SCRIPT = `set -u
dir="/workspace/$SEED_PATH"
mkdir -p "$dir" && cd "$dir" || exit 1
if [ -e .git ]; then echo "already seeded" >&2; exit 0; fi
fail() { rm -rf .git; exit 1; }
git init -q . || fail
git fetch -q --no-tags --depth=1 "$SEED_URL" "$SEED_REF" || fail
commit=$(git rev-parse 'FETCH_HEAD^{commit}') || fail
git update-ref ${SEED_REF} "$commit" || fail
git -c advice.detachedHead=false checkout -q --detach "$commit" || fail
echo "seeded $commit" >&2`;

const DIFF_SCRIPT = `set -u
cd "/workspace/$SEED_PATH" 2>/dev/null && git rev-parse -q --verify ${SEED_REF} >/dev/null 2>&1 || exit ${NOT_SEEDED_EXIT}
export GIT_INDEX_FILE=/tmp/index GIT_OBJECT_DIRECTORY=/tmp/objects GIT_ALTERNATE_OBJECT_DIRECTORIES="$PWD/.git/objects"
mkdir -p /tmp/objects
{ cp .git/index /tmp/index 2>/dev/null || git read-tree ${SEED_REF}; } && git add -A . && exec git diff --cached --no-color --no-ext-diff --binary ${SEED_REF}`;

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
    Env: ["HOME=/tmp", "GIT_TERMINAL_PROMPT=0", "GIT_CONFIG_NOSYSTEM=1", "LANG=C.UTF-8", ...g.env],
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
async function runGit(
  docker: Docker,
  g: GitContainer,
): Promise<{
  stdout: PassThrough;
  stderr: () => string;
  exit: Promise<number>;
  remove: () => Promise<void>;
}> {
  await assertImage(docker, g.image);
  const container = await docker.createContainer(gitContainerOptions(g));
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
    })) as NodeJS.ReadableStream;
    const stdout = new PassThrough();
    const errors = new PassThrough();
    let errorText = "";
    errors.on("data", (chunk: Buffer) => {
      if (errorText.length < MAX_ERROR_CHARS * 4) errorText += chunk.toString("utf8");
    });
    docker.modem.demuxStream(attached, stdout, errors);
    attached.on("end", () => stdout.end());
    await container.start();
    const exit = container.wait().then((r: { StatusCode: number }) => r.StatusCode);
    return { stdout, stderr: () => errorText, exit, remove };
  } catch (error) {
    await remove();
    throw error;
  }
}

async function assertImage(docker: Docker, image: string): Promise<void> {
  try {
    await docker.getImage(image).inspect();
  } catch {
    throw new CodedError("FAILED_PRECONDITION", `the runner's git image ${image} is not on the engine`);
  }
}

/** git's own words, without credentials or URLs' user parts, the gateway named as the user's URL. */
export function gitError(text: string, secrets: string[], gatewayUrl: string, url: string): string {
  let out = text.split(gatewayUrl).join(url);
  for (const secret of secrets) if (secret.length > 0) out = out.split(secret).join("***");
  out = redactUrl(out)
    .split("\n")
    .filter((l) => l.trim() !== "")
    .join("; ");
  return out.length > MAX_ERROR_CHARS ? `${out.slice(0, MAX_ERROR_CHARS)}…` : out;
}

/**
 * Seeds the session volume from `spec.repo` unless it already was (no-op without a repo).
 * FAILED_PRECONDITION (details.reason RepoCloneFailed) with git's error when the fetch or checkout fails.
 */
export async function seedWorkspaceRepo(
  docker: Docker,
  gitImage: string | undefined,
  spec: SessionSpec,
  credentials: Record<string, string>,
): Promise<void> {
  const repo = spec.repo;
  if (!repo) return;
  if (!gitImage)
    throw new CodedError(
      "FAILED_PRECONDITION",
      "this runner has no git image (AGENT_SESSIONS_GIT_IMAGE) to seed a workspace from a repository",
      { reason: "RepoCloneFailed" },
    );
  const base = workloadName(spec.namespace, spec.name);
  const network = `${base}-net`;
  const gatewayUrl = viaGateway(repo.url, spec.egress, await networkGateway(docker, network));
  const env = [`SEED_URL=${gatewayUrl}`, `SEED_REF=${repo.ref ?? "HEAD"}`, `SEED_PATH=${repo.path}`];
  const secret = repo.credential ? credentials[repo.credential] : undefined;
  if (repo.credential && secret === undefined)
    throw new CodedError("FAILED_PRECONDITION", `repository credential ${repo.credential} was not given`, {
      reason: "RepoCloneFailed",
    });
  // Given to the engine at create time only, as git configuration (never on a command line).
  const basic = secret !== undefined ? Buffer.from(`git:${secret}`).toString("base64") : undefined;
  if (basic)
    env.push(
      "GIT_CONFIG_COUNT=1",
      "GIT_CONFIG_KEY_0=http.extraHeader",
      `GIT_CONFIG_VALUE_0=Authorization: Basic ${basic}`,
    );
  const run = await runGit(docker, {
    image: gitImage,
    base,
    script: SEED_SCRIPT,
    env,
    network,
    readOnly: false,
  });
  try {
    run.stdout.resume();
    let timer: NodeJS.Timeout | undefined;
    const code = await Promise.race([
      run.exit,
      new Promise<number>((resolve) => {
        timer = setTimeout(() => resolve(-1), SEED_TIMEOUT_MS);
      }),
    ]).finally(() => clearTimeout(timer));
    if (code === 0) return;
    const why =
      code === -1
        ? `timed out after ${SEED_TIMEOUT_MS / 1000} s`
        : gitError(run.stderr(), [secret ?? "", basic ?? ""], gatewayUrl, repo.url) || `exit ${code}`;
    throw new CodedError(
      "FAILED_PRECONDITION",
      `seeding /workspace/${repo.path} from ${redactUrl(repo.url)} at ${repo.ref ?? "HEAD"} failed: ${why}`,
      { reason: "RepoCloneFailed" },
    );
  } finally {
    await run.remove();
  }
}

/**
 * `git diff` of `/workspace/<path>` against its seeded commit, untracked files included, streamed.
 * FAILED_PRECONDITION when the path holds no seeded checkout. Works with the session stopped too
 * (only the volume is needed).
 */
export async function workspaceRepoDiff(
  docker: Docker,
  gitImage: string | undefined,
  containerName: string,
  path: string,
): Promise<AsyncIterable<Buffer>> {
  if (!gitImage)
    throw new CodedError(
      "FAILED_PRECONDITION",
      "this runner has no git image (AGENT_SESSIONS_GIT_IMAGE) for a diff",
    );
  const run = await runGit(docker, {
    image: gitImage,
    base: containerName,
    script: DIFF_SCRIPT,
    env: [`SEED_PATH=${path}`],
    network: "none",
    readOnly: true,
  });
  return (async function* () {
    try {
      for await (const chunk of run.stdout) yield chunk as Buffer;
      const code = await run.exit;
      if (code === NOT_SEEDED_EXIT)
        throw new CodedError(
          "FAILED_PRECONDITION",
          `workspace ${containerName} holds no checkout seeded from a repository at /workspace/${path}`,
        );
      if (code !== 0)
        throw new CodedError("INTERNAL", `git diff failed: ${gitError(run.stderr(), [], "\u0000", "")}`);
    } finally {
      await run.remove();
    }
  })();
}
