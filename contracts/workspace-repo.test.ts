import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { ProvisionAgentWorkspaceRequest } from "./rpc.ts";
import {
  RepoPath,
  WorkspaceRepo,
  defaultRepoPath,
  redactUrl,
  repoEgressProblem,
  seedRepoOf,
  workstreamParts,
} from "./workspace-repo.ts";

describe("workstream repository", () => {
  it("a plain string workstream keeps meaning the name; an object names the repository", () => {
    const plain = ProvisionAgentWorkspaceRequest.parse({ agent_ref: "a", workstream: "main" });
    expect(workstreamParts(plain.workstream)).toEqual({ name: "main" });
    const repo = ProvisionAgentWorkspaceRequest.parse({
      agent_ref: "a",
      workstream: { name: "w", repo: { url: "http://10.0.0.5:8418/app.git", ref: "v1" } },
    });
    expect(workstreamParts(repo.workstream)).toEqual({
      name: "w",
      repo: { url: "http://10.0.0.5:8418/app.git", ref: "v1" },
    });
  });

  it("the checkout path defaults to the URL's last segment without .git, as git clone names it", () => {
    expect(defaultRepoPath("http://10.0.0.5/group/app.git")).toBe("app");
    expect(defaultRepoPath("http://10.0.0.5/app/")).toBe("app");
    expect(defaultRepoPath("http://10.0.0.5/")).toBe("repo");
    expect(seedRepoOf({ url: "http://10.0.0.5/app.git", path: "src/app" }).path).toBe("src/app");
  });

  it("refuses URLs with a user or password, other schemes, bad refs and paths leaving /workspace", () => {
    for (const url of [
      "http://u:p@10.0.0.5/a.git",
      "ssh://10.0.0.5/a.git",
      "file:///etc",
      "git://10.0.0.5/a",
    ])
      expect(WorkspaceRepo.safeParse({ url }).success, url).toBe(false);
    for (const ref of ["-x", "a..b", "a/", "a.lock", "a b", "a//b", ""])
      expect(WorkspaceRepo.safeParse({ url: "http://10.0.0.5/a.git", ref }).success, ref).toBe(false);
    for (const path of ["/abs", "..", "a/../b", "a/./b", "a//b", ""])
      expect(WorkspaceRepo.safeParse({ url: "http://10.0.0.5/a.git", path }).success, path).toBe(false);
  });

  it("no accepted checkout path has a '..' or '.' segment or starts with '/'", () => {
    fc.assert(
      fc.property(fc.string({ maxLength: 40 }), (path) => {
        if (!RepoPath.safeParse(path).success) return;
        expect(path.startsWith("/")).toBe(false);
        expect(path.split("/").some((s) => s === ".." || s === "." || s === "")).toBe(false);
      }),
    );
  });

  it("the repository must be an address and port the Agent's egress allows", () => {
    const egress = [{ cidr: "10.213.0.0/24", port: 8418 }];
    expect(repoEgressProblem("http://10.213.0.1:8418/a.git", egress)).toBeUndefined();
    expect(repoEgressProblem("http://10.213.0.1:8419/a.git", egress)).toBe(
      "repository 10.213.0.1:8419 is not in the Agent's egress",
    );
    expect(repoEgressProblem("http://10.214.0.1:8418/a.git", egress)).toMatch(/not in the Agent's egress/);
    expect(repoEgressProblem("https://10.213.0.1/a.git", egress)).toMatch(/10\.213\.0\.1:443 is not/);
    expect(repoEgressProblem("http://git.example/a.git", egress)).toMatch(/not an IPv4 address/);
  });

  it("messages lose any user part of a URL", () => {
    expect(redactUrl("fatal: http://git:tok@10.0.0.1/a.git not found")).toBe(
      "fatal: http://10.0.0.1/a.git not found",
    );
  });
});
