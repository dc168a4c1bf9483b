import { execFileSync, spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { beforeEach, describe, expect, it } from "vitest";
import { DIFF_SCRIPT, GIT_BASE_ENV, NOT_SEEDED_EXIT, SEED_SCRIPT } from "./repo-scripts.ts";

// These run the scripts with the machine's real git on a temporary workspace: what git reads
// and runs is the point, and only a real git shows it.

let root: string;
let checkout: string;
let scratch: string;

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

function diff() {
  return sh(DIFF_SCRIPT, { SEED_PATH: "repo", DIFF_SCRATCH: scratch });
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
    const out = sh(DIFF_SCRIPT, { SEED_PATH: "repo", DIFF_SCRATCH: scratch, HOME: home });
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

  it("finds the seeded commit when the refs were packed (git gc, pack-refs)", () => {
    execFileSync("git", ["pack-refs", "--all"], {
      cwd: checkout,
      env: { PATH: process.env.PATH, HOME: root },
    });
    expect(existsSync(join(checkout, ".git", "refs", "agent-sessions", "seed"))).toBe(false);
    writeFileSync(join(checkout, "README.md"), "hello\npacked\n");
    const out = diff();
    expect(out.status, out.stderr).toBe(0);
    expect(out.stdout).toContain("+packed");
  });

  it("exits NOT_SEEDED_EXIT where no seeded checkout is", () => {
    expect(sh(DIFF_SCRIPT, { SEED_PATH: "elsewhere", DIFF_SCRATCH: scratch }).status).toBe(NOT_SEEDED_EXIT);
  });
});
