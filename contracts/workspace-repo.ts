import { z } from "zod";
import { parseCidr, parseIpv4 } from "./egress.ts";

/**
 * A workstream that is a repository (issue 18): the workspace volume is seeded once, at its first
 * provision, with a checkout of `url` at `ref` under `/workspace/<path>`; a re-provision or a
 * resume never touches it again (the agent's changes are its own). `workspace:diff` is a git diff
 * of that checkout against the seeded commit.
 */

/** A ref to fetch: a branch or tag name (`main`, `v1`, `refs/heads/x`). No `..`, no leading `-`. */
export const RepoRef = z
  .string()
  .min(1)
  .max(255)
  .regex(/^[A-Za-z0-9_][A-Za-z0-9._/-]*$/, "a branch or tag name: letters, digits, '.', '_', '/', '-'")
  .refine((s) => !s.includes("..") && !s.endsWith("/") && !s.endsWith(".lock") && !s.includes("//"), {
    message: "not a valid git ref name",
  });

/**
 * The commit a workspace was seeded at, as the runner saw its seed fetch it (issue 34 item 12): a
 * full SHA-1 object id. The server keeps it with the workspace and hands it to every diff; the
 * diff never reads it from the checkout, where the agent could move it.
 */
export const SeededCommit = z.string().regex(/^[0-9a-f]{40}$/, "a full commit id: 40 lowercase hex digits");

/** Where the checkout goes, relative to /workspace: segments of `A-Za-z0-9._-`, none `.` or `..`. */
export const RepoPath = z
  .string()
  .min(1)
  .max(255)
  .regex(/^[A-Za-z0-9._-]+(\/[A-Za-z0-9._-]+)*$/, "a relative path under /workspace (no leading '/')")
  .refine((p) => p.split("/").every((s) => s !== "." && s !== ".."), {
    message: "must not contain '.' or '..' segments",
  });

const CredentialName = z
  .string()
  .regex(/^[A-Z_][A-Z0-9_]*$/, "a credential name of the Agent (A-Z, 0-9, _)")
  .max(128);

export const WorkspaceRepo = z.strictObject({
  /**
   * `http(s)://ADDRESS[:PORT]/…`: the host is an IPv4 address the Agent's egress allows (sessions
   * reach nothing else and resolve no names). No user or password in it: a credential comes from
   * the Agent's allowlist (`credential`).
   */
  url: z
    .url({ protocol: /^https?$/ })
    .max(2048)
    .refine((u) => !/^[a-z]+:\/\/[^/]*@/i.test(u), {
      message: "must not carry a user or password (name one of the Agent's credentials in `credential`)",
    }),
  /** @default the repository's default branch (HEAD) */
  ref: RepoRef.optional(),
  /** @default the last segment of the URL without `.git` (as `git clone` names it) */
  path: RepoPath.optional(),
  /**
   * One of the Agent's credentials, sent as the HTTP Basic password (user `git`); it never enters
   * the stack state, a log or an error.
   */
  credential: CredentialName.optional(),
});
export type WorkspaceRepo = z.infer<typeof WorkspaceRepo>;

/** A workstream name: lowercase letters, digits and '-' (the seed's). */
export const WorkstreamName = z
  .string()
  .max(128)
  .regex(/^[a-z0-9-]*$/, "lowercase letters, digits and '-'");

/** A plain string keeps meaning the name; an object names the repository the workspace starts from. */
export const Workstream = z.union([
  WorkstreamName,
  z.strictObject({ name: WorkstreamName, repo: WorkspaceRepo }),
]);
export type Workstream = z.infer<typeof Workstream>;

/** The name and repository of a workstream as given. */
export function workstreamParts(workstream: Workstream): { name: string; repo?: WorkspaceRepo } {
  return typeof workstream === "string" ? { name: workstream } : workstream;
}

/** The repository as a session spec carries it: every default filled. */
export const SeedRepo = z.strictObject({
  url: z.string().max(2048),
  ref: RepoRef.optional(),
  path: RepoPath,
  credential: CredentialName.optional(),
});
export type SeedRepo = z.infer<typeof SeedRepo>;

/** The checkout directory `git clone URL` would choose: the last path segment without `.git`. */
export function defaultRepoPath(url: string): string {
  const last = new URL(url).pathname.split("/").filter(Boolean).pop() ?? "";
  const name = last.replace(/\.git$/, "");
  return RepoPath.safeParse(name).success ? name : "repo";
}

export function seedRepoOf(repo: WorkspaceRepo): SeedRepo {
  return {
    url: repo.url,
    ...(repo.ref ? { ref: repo.ref } : {}),
    path: repo.path ?? defaultRepoPath(repo.url),
    ...(repo.credential ? { credential: repo.credential } : {}),
  };
}

/**
 * Why the repository cannot be reached under `egress`, or undefined when it can: its host must be
 * an IPv4 address inside a rule's range, on the rule's port.
 */
export function repoEgressProblem(
  url: string,
  egress: readonly { cidr: string; port: number }[],
): string | undefined {
  const parsed = new URL(url);
  const host = parsed.hostname;
  const address = parseIpv4(host);
  if (address === undefined)
    return `repository host ${host} is not an IPv4 address (sessions resolve no names; use the address the Agent's egress allows)`;
  const port = parsed.port ? Number(parsed.port) : parsed.protocol === "https:" ? 443 : 80;
  const allowed = egress.some((rule) => {
    const cidr = parseCidr(rule.cidr);
    return cidr.ok && cidr.range.first <= address && address <= cidr.range.last && rule.port === port;
  });
  return allowed ? undefined : `repository ${host}:${port} is not in the Agent's egress`;
}

/** A URL with any user or password removed (for messages). */
export function redactUrl(text: string): string {
  return text.replace(/([a-z]+:\/\/)[^/@\s]*@/gi, "$1");
}
