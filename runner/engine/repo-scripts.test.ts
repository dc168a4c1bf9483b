import { execFileSync, spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { beforeEach, describe, expect, it } from "vitest";
import {
  DIFF_SCRIPT,
  GIT_BASE_ENV,
  NOT_SEEDED_EXIT,
  OBJECTS_UNVERIFIED_EXIT,
  SEED_SCRIPT,
  diffFailed,
  diffInputs,
  seededCommitOf,
} from "./repo-scripts.ts";

// These run the scripts with the machine's real git on a temporary workspace: what git reads
// and runs is the point, and only a real git shows it.

let root: string;
let checkout: string;
let scratch: string;
/** The commit the seed printed: what the runner returns and the server keeps. */
let seededCommit: string;

function sh(script: string, env: Record<string, string>) {
  return spawnSync("/bin/sh", ["-c", script], {
    env: {
      PATH: process.env.PATH ?? "/usr/bin:/bin",
      ...Object.fromEntries(GIT_BASE_ENV.map((e) => e.split(/=(.*)/s).slice(0, 2))),
      WORKSPACE_ROOT: root,
      ...env,
    },
    encoding: "utf8",
  });
}

function diffEnv(commit = seededCommit, path = "repo"): Record<string, string> {
  return {
    ...Object.fromEntries(diffInputs(path, commit).map((e) => e.split(/=(.*)/s).slice(0, 2))),
    DIFF_SCRATCH: scratch,
  };
}

function diff() {
  return sh(DIFF_SCRIPT, diffEnv());
}

beforeEach(() => {
  const base = mkdtempSync(join(tmpdir(), "repo-scripts-"));
  const source = join(base, "source");
  mkdirSync(source);
  const git = (...args: string[]) =>
    execFileSync("git", ["-c", "user.name=t", "-c", "user.email=t@t", ...args], {
      cwd: source,
      env: { PATH: process.env.PATH, HOME: base },
    });
  git("init", "-q", ".");
  writeFileSync(join(source, "README.md"), "hello\n");
  git("add", "README.md");
  git("commit", "-q", "-m", "seed");
  root = join(base, "workspace");
  scratch = join(base, "scratch");
  mkdirSync(root);
  mkdirSync(scratch);
  const seeded = sh(SEED_SCRIPT, { SEED_URL: `file://${source}`, SEED_REF: "HEAD", SEED_PATH: "repo" });
  expect(seeded.status, seeded.stderr).toBe(0);
  checkout = join(root, "repo");
  const head = execFileSync("git", ["rev-parse", "HEAD"], { cwd: source, encoding: "utf8" }).trim();
  expect(seededCommitOf(seeded.stdout)).toBe(head);
  seededCommit = head;
});

describe("the workspace diff is computed by git the agent cannot configure", () => {
  it("shows the agent's change to a tracked file and a new file", () => {
    writeFileSync(join(checkout, "README.md"), "hello\nchanged\n");
    writeFileSync(join(checkout, "new.txt"), "new\n");
    const out = diff();
    expect(out.status, out.stderr).toBe(0);
    expect(out.stdout).toContain("+changed");
    expect(out.stdout).toContain("+++ b/new.txt");
  });

  it("shows a change a clean filter in .git/config and .git/info/attributes would hide, running none of it", () => {
    const ran = join(root, "filter-ran");
    writeFileSync(
      join(checkout, ".git", "config"),
      `[filter "hide"]\n\tclean = "touch ${ran}; sed /evil/d"\n\trequired = true\n` +
        `[diff "conv"]\n\ttextconv = "touch ${ran}; sed s/evil/good/"\n` +
        `[diff]\n\texternal = "touch ${ran}"\n` +
        `[core]\n\tfsmonitor = "touch ${ran}"\n\tattributesFile = ${join(checkout, "attrs")}\n`,
    );
    mkdirSync(join(checkout, ".git", "info"), { recursive: true });
    writeFileSync(join(checkout, ".git", "info", "attributes"), "README.md filter=hide diff=conv\n");
    writeFileSync(join(checkout, ".git", "info", "exclude"), "hidden.txt\n");
    writeFileSync(join(checkout, "README.md"), "hello\nevil\n");
    writeFileSync(join(checkout, "hidden.txt"), "also evil\n");
    const out = diff();
    expect(out.status, out.stderr).toBe(0);
    expect(out.stdout).toContain("+evil");
    expect(out.stdout).toContain("+also evil");
    expect(existsSync(ran)).toBe(false);
  });

  it("takes nothing from a global or system configuration either", () => {
    const ran = join(root, "global-ran");
    const home = join(root, "home");
    mkdirSync(home);
    writeFileSync(join(home, ".gitconfig"), `[core]\n\tfsmonitor = "touch ${ran}"\n`);
    writeFileSync(join(checkout, "README.md"), "hello\nmore\n");
    const out = sh(DIFF_SCRIPT, { ...diffEnv(), HOME: home });
    expect(out.status, out.stderr).toBe(0);
    expect(out.stdout).toContain("+more");
    expect(existsSync(ran)).toBe(false);
  });

  it("does not trust the stat data of the agent's index", () => {
    // `git update-index --assume-unchanged` in the agent's index would hide the change from a
    // diff that starts from that index.
    writeFileSync(join(checkout, "README.md"), "hello\nsneaky\n");
    execFileSync("git", ["update-index", "--assume-unchanged", "README.md"], {
      cwd: checkout,
      env: { PATH: process.env.PATH, HOME: root },
    });
    const out = diff();
    expect(out.status, out.stderr).toBe(0);
    expect(out.stdout).toContain("+sneaky");
  });

  it("shows a deleted file, a binary file whole, and nothing for a file only touched", () => {
    execFileSync("rm", [join(checkout, "README.md")]);
    writeFileSync(join(checkout, "blob.bin"), Buffer.from([0, 1, 2, 255]));
    const out = diff();
    expect(out.status, out.stderr).toBe(0);
    expect(out.stdout).toContain("deleted file mode");
    expect(out.stdout).toContain("GIT binary patch");
    writeFileSync(join(checkout, "README.md"), "hello\n");
    execFileSync("rm", [join(checkout, "blob.bin")]);
    expect(diff().stdout).toBe("");
  });

  it("shows a change the agent committed and pointed the seed ref at, the ref's file moved or rewritten", () => {
    const git = (...args: string[]) =>
      execFileSync("git", ["-c", "user.name=a", "-c", "user.email=a@a", ...args], {
        cwd: checkout,
        env: { PATH: process.env.PATH, HOME: root },
      });
    writeFileSync(join(checkout, "README.md"), "hello\nmalicious\n");
    git("commit", "-q", "-am", "hide");
    git("update-ref", "refs/agent-sessions/seed", "HEAD");
    git("pack-refs", "--all");
    const out = diff();
    expect(out.status, out.stderr).toBe(0);
    expect(out.stdout).toContain("+malicious");
    // Gone altogether, or rewritten as a loose ref: the diff never looked at it.
    rmSync(join(checkout, ".git", "packed-refs"));
    expect(diff().stdout).toContain("+malicious");
    mkdirSync(join(checkout, ".git", "refs", "agent-sessions"), { recursive: true });
    writeFileSync(join(checkout, ".git", "refs", "agent-sessions", "seed"), `${git("rev-parse", "HEAD")}`);
    expect(diff().stdout).toContain("+malicious");
  });

  it("refuses to diff when the agent rewrote the seeded object of a file it changed (its objects do not verify)", () => {
    const agentGit = (...args: string[]) =>
      execFileSync("git", args, {
        cwd: checkout,
        env: { PATH: process.env.PATH, HOME: root },
        encoding: "utf8",
      }).trim();
    writeFileSync(join(checkout, "README.md"), "hello\nmalicious\n");
    // The seeded README's object now holds the new content (a small fetch keeps its objects loose).
    const seeded = agentGit("rev-parse", `${seededCommit}:README.md`);
    const rewritten = agentGit("hash-object", "-w", "README.md");
    const objects = join(checkout, ".git", "objects");
    const seededFile = join(objects, seeded.slice(0, 2), seeded.slice(2));
    expect(existsSync(seededFile)).toBe(true);
    rmSync(seededFile, { force: true });
    writeFileSync(seededFile, readFileSync(join(objects, rewritten.slice(0, 2), rewritten.slice(2))));
    const out = diff();
    expect(out.stdout).not.toContain("diff --git");
    expect(out.status).toBe(OBJECTS_UNVERIFIED_EXIT);
    expect(diffFailed(out.status, out.stderr, "c", "repo", seededCommit)).toMatchObject({
      code: "FAILED_PRECONDITION",
      details: { reason: "CheckoutObjectsUnverified" },
      message: expect.stringMatching(/do not match their names.*mismatch/),
    });
  });

  it("prints nothing on a second seed, which fetches nothing (the recorded commit stays the one to diff against)", () => {
    const again = sh(SEED_SCRIPT, { SEED_URL: "file:///nowhere", SEED_REF: "HEAD", SEED_PATH: "repo" });
    expect(again.status, again.stderr).toBe(0);
    expect(seededCommitOf(again.stdout)).toBeUndefined();
  });

  it("refuses a seeded commit that is not a full commit id, before any script runs and in the script", () => {
    expect(() => diffInputs("repo", "HEAD")).toThrow(/40 lowercase hex/);
    expect(() => diffInputs("repo", seededCommit.slice(0, 12))).toThrow(/40 lowercase hex/);
    expect(() => diffInputs("repo", `${seededCommit}\n`)).toThrow(/40 lowercase hex/);
    const out = sh(DIFF_SCRIPT, { SEED_PATH: "repo", DIFF_SCRATCH: scratch, SEED_COMMIT: "HEAD" });
    expect(out.status).toBe(2);
    expect(sh(DIFF_SCRIPT, { SEED_PATH: "repo", DIFF_SCRATCH: scratch }).status).toBe(2);
  });

  it("exits NOT_SEEDED_EXIT when the checkout does not hold the seeded commit", () => {
    expect(sh(DIFF_SCRIPT, diffEnv("0".repeat(40))).status).toBe(NOT_SEEDED_EXIT);
  });

  it("exits NOT_SEEDED_EXIT where no seeded checkout is", () => {
    expect(sh(DIFF_SCRIPT, diffEnv(seededCommit, "elsewhere")).status).toBe(NOT_SEEDED_EXIT);
  });
});
