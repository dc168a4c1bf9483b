/**
 * The git side of a workspace seeded from a repository (issue 18), the same on every engine: the
 * POSIX sh scripts that seed a checkout once and diff it against the seeded commit, the
 * environment they take, and how git's errors are told without a credential. Docker runs them in
 * a short-lived container of the runner's git image (runner/docker/repo-seed.ts); Kubernetes in the
 * session pod's `workspace` sidecar of that image (runner/kubernetes/repo-seed.ts).
 *
 * Inputs come as environment, never spliced into a script or a command line. `WORKSPACE_ROOT` is
 * where the session volume is mounted (/workspace when unset; a temporary directory in the tests
 * that run these scripts with the real git).
 */
import { CodedError } from "../../contracts/errors.ts";
import type { SessionSpec } from "../../contracts/session-spec.ts";
import { SeededCommit, redactUrl } from "../../contracts/workspace-repo.ts";

/** The ref the seeded commit is kept under. */
export const SEED_REF = "refs/agent-sessions/seed";
/** Exit status of the diff script when the path holds no seeded checkout. */
export const NOT_SEEDED_EXIT = 3;
/** Exit status of the diff script when the checkout's objects do not verify (`git fsck`). */
export const OBJECTS_UNVERIFIED_EXIT = 4;
/** git's error text kept for a message. */
const MAX_ERROR_CHARS = 2_000;
export const SEED_TIMEOUT_MS = 120_000;

/**
 * Seeded once: when `/workspace/$SEED_PATH/.git` exists nothing is fetched (a re-provision or
 * resume never clobbers the agent's changes). The commit it fetched is its only stdout
 * (`seeded <commit>`, seededCommitOf): the runner returns it with the provision and the server
 * keeps it, because the diff must not learn it from the checkout (the agent writes there). It is
 * kept as SEED_REF too, for people looking into the checkout; nothing trusts that ref.
 */
export const SEED_SCRIPT = `set -u
dir="\${WORKSPACE_ROOT:-/workspace}/$SEED_PATH"
mkdir -p "$dir" && cd "$dir" || exit 1
if [ -e .git ]; then echo "already seeded" >&2; exit 0; fi
exec 3>&1 1>&2
fail() { rm -rf .git; exit 1; }
git init -q . || fail
git fetch -q --no-tags --depth=1 "$SEED_URL" "$SEED_REF" || fail
commit=$(git rev-parse 'FETCH_HEAD^{commit}') || fail
git update-ref ${SEED_REF} "$commit" || fail
git -c advice.detachedHead=false checkout -q --detach "$commit" || fail
echo "seeded $commit" >&3`;

/**
 * The diff against the seeded commit, untracked files included, computed by a git the agent
 * cannot configure (issue 34 item 12). The agent writes the checkout's `.git` as it likes, and git
 * reads a repository's own configuration always: a clean filter or textconv there hides a change
 * from the diff (and is a shell command run here), `core.fsmonitor` runs one on any index refresh,
 * `info/attributes` and `info/exclude` pick what is filtered or left out. So this git never opens
 * the agent's repository: its GIT_DIR is a scratch directory made here (no config, attributes,
 * excludes or hooks in it) that borrows the checkout's objects read-only through `alternates`,
 * the seeded commit is an input (SEED_COMMIT, what the runner saw the seed fetch: never the
 * checkout's seed ref, which the agent can point at a commit of its own), its index is built
 * fresh from that commit (the agent's index could say a changed file is unchanged), and no system
 * or global configuration, attributes file, external diff or textconv is taken. New files enter
 * that index as intent-to-add (`add -N`), and the commit is compared with the working tree: every
 * file is hashed in memory, none is written as an object (the checkout's object directory is
 * read-only here, so git could not reuse its objects, and the scratch space is bounded).
 *
 * The objects the baseline is read from are the checkout's, which the agent can write too: it
 * could overwrite the seeded blob of a file it changed with the new content, and git does not
 * check an object against its name when it reads it. So `git fsck` hashes every object first
 * (loose, packed, and in alternates the checkout names; the seeded commit marked shallow, as the
 * seed fetched it at depth 1) and a mismatch refuses the diff (OBJECTS_UNVERIFIED_EXIT).
 *
 * What still comes from the checkout: its tracked and untracked `.gitignore`s and `.gitattributes`
 * (as in any clone; without configuration an attribute can only name git's built-in behaviour,
 * never a command), and the objects themselves, verified.
 */
export const DIFF_SCRIPT = `set -u
cd "\${WORKSPACE_ROOT:-/workspace}/$SEED_PATH" 2>/dev/null && [ -d .git/objects ] || exit ${NOT_SEEDED_EXIT}
seed=\${SEED_COMMIT:-}
case "$seed" in *[!0-9a-f]*|"") echo "SEED_COMMIT is not a commit id" >&2; exit 2 ;; esac
[ \${#seed} -eq 40 ] || { echo "SEED_COMMIT is not a full commit id" >&2; exit 2; }
scratch=$(mktemp -d "$DIFF_SCRATCH/diff.XXXXXX") || exit 1
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$scratch/git/objects/info" "$scratch/git/refs" || exit 1
echo "$seed" > "$scratch/git/HEAD" && echo "$seed" > "$scratch/git/shallow" && echo "$PWD/.git/objects" > "$scratch/git/objects/info/alternates" || exit 1
export GIT_DIR="$scratch/git" GIT_WORK_TREE="$PWD" GIT_INDEX_FILE="$scratch/index" HOME="$scratch" XDG_CONFIG_HOME="$scratch" GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null GIT_ATTR_NOSYSTEM=1
unset GIT_CONFIG GIT_CONFIG_PARAMETERS GIT_CONFIG_COUNT GIT_OBJECT_DIRECTORY GIT_ALTERNATE_OBJECT_DIRECTORIES GIT_EXTERNAL_DIFF
git() { command git -c core.attributesFile=/dev/null -c core.excludesFile=/dev/null -c core.fsmonitor=false -c core.hooksPath=/dev/null "$@"; }
git cat-file -e "$seed^{commit}" 2>/dev/null || exit ${NOT_SEEDED_EXIT}
git fsck --no-dangling --no-progress --no-reflogs >/dev/null 2>"$scratch/fsck" || { head -n 5 "$scratch/fsck" >&2; exit ${OBJECTS_UNVERIFIED_EXIT}; }
git read-tree "$seed" && git add -A -N . && git diff --no-color --no-ext-diff --no-textconv --binary "$seed"`;

/** The commit the seed script printed, or undefined when it fetched nothing (already seeded). */
export function seededCommitOf(stdout: string): string | undefined {
  return /^seeded ([0-9a-f]{40})$/m.exec(stdout)?.[1];
}

/**
 * The diff script's inputs for the checkout at `path` seeded at `seededCommit` (the commit the
 * server recorded from the seed, never read from the workspace). INVALID_ARGUMENT when it is not
 * a full commit id: it goes into the script's environment only once checked.
 */
export function diffInputs(path: string, seededCommit: string): string[] {
  if (!SeededCommit.safeParse(seededCommit).success)
    throw new CodedError(
      "INVALID_ARGUMENT",
      "seeded_commit must be a full commit id (40 lowercase hex digits)",
    );
  return [`SEED_PATH=${path}`, `SEED_COMMIT=${seededCommit}`];
}

/**
 * What a diff script's non-zero exit means, as an error naming the workspace; `stderr` is what it
 * wrote (git's words).
 */
export function diffFailed(
  code: number | null,
  stderr: string,
  containerName: string,
  path: string,
  seededCommit: string,
): CodedError {
  if (code === NOT_SEEDED_EXIT)
    return new CodedError(
      "FAILED_PRECONDITION",
      `workspace ${containerName} holds no checkout seeded from a repository at /workspace/${path} (or it lost the seeded commit ${seededCommit})`,
    );
  const why = gitError(stderr, [], "\u0000", "");
  if (code === OBJECTS_UNVERIFIED_EXIT)
    return new CodedError(
      "FAILED_PRECONDITION",
      `the checkout at /workspace/${path} of workspace ${containerName} holds objects that do not match their names (rewritten after the seed?), so a diff against its seeded commit cannot be trusted: ${why}`,
      { reason: "CheckoutObjectsUnverified" },
    );
  return new CodedError("INTERNAL", `git diff failed: ${why}`);
}

/** What every git run gets besides its own inputs. */
export const GIT_BASE_ENV = [
  "HOME=/tmp",
  "GIT_TERMINAL_PROMPT=0",
  "GIT_CONFIG_NOSYSTEM=1",
  "GIT_CONFIG_GLOBAL=/dev/null",
  "LANG=C.UTF-8",
];

/** The seed's inputs for `url` (the address the workload reaches the repository at). */
export type SeedInputs = {
  /** NAME=value pairs for the seed script. */
  env: string[];
  /** What must never appear in a message: the credential and its Basic encoding. */
  secrets: string[];
};

/**
 * The seed script's environment for `spec.repo` fetched from `url`; the credential goes in as git
 * configuration (an `http.extraHeader`), never on a command line or in a URL.
 * FAILED_PRECONDITION (RepoCloneFailed) when the named credential was not given.
 */
export function seedInputs(
  repo: NonNullable<SessionSpec["repo"]>,
  url: string,
  credentials: Record<string, string>,
): SeedInputs {
  const env = [`SEED_URL=${url}`, `SEED_REF=${repo.ref ?? "HEAD"}`, `SEED_PATH=${repo.path}`];
  const secret = repo.credential ? credentials[repo.credential] : undefined;
  if (repo.credential && secret === undefined)
    throw new CodedError("FAILED_PRECONDITION", `repository credential ${repo.credential} was not given`, {
      reason: "RepoCloneFailed",
    });
  if (secret === undefined) return { env, secrets: [] };
  const basic = Buffer.from(`git:${secret}`).toString("base64");
  env.push(
    "GIT_CONFIG_COUNT=1",
    "GIT_CONFIG_KEY_0=http.extraHeader",
    `GIT_CONFIG_VALUE_0=Authorization: Basic ${basic}`,
  );
  return { env, secrets: [secret, basic] };
}

/** FAILED_PRECONDITION (RepoCloneFailed) naming the repository, ref and git's reason. */
export function seedFailed(repo: NonNullable<SessionSpec["repo"]>, why: string): CodedError {
  return new CodedError(
    "FAILED_PRECONDITION",
    `seeding /workspace/${repo.path} from ${redactUrl(repo.url)} at ${repo.ref ?? "HEAD"} failed: ${why}`,
    { reason: "RepoCloneFailed" },
  );
}

/** The runner has no git image: a repository cannot be seeded (RepoCloneFailed). */
export function noGitImage(what: string): CodedError {
  return new CodedError(
    "FAILED_PRECONDITION",
    `this runner has no git image (AGENT_SESSIONS_GIT_IMAGE) to ${what}`,
    what.startsWith("seed") ? { reason: "RepoCloneFailed" } : undefined,
  );
}

/** git's own words, without credentials or URLs' user parts, `seenUrl` named as the user's `url`. */
export function gitError(text: string, secrets: string[], seenUrl: string, url: string): string {
  let out = text.split(seenUrl).join(url);
  for (const secret of secrets) if (secret.length > 0) out = out.split(secret).join("***");
  out = redactUrl(out)
    .split("\n")
    .filter((l) => l.trim() !== "")
    .join("; ");
  return out.length > MAX_ERROR_CHARS ? `${out.slice(0, MAX_ERROR_CHARS)}…` : out;
}
