import { mkdirSync, mkdtempSync, realpathSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { beforeAll, describe, expect, it } from "vitest";
import { type Confinement, confinedPath, confinement, PathOutsideWorkspace } from "./confine.ts";

describe("compass tool paths stay in the workspace and the scratch dir", () => {
  let root: string;
  let workspace: string;
  let scratch: string;
  let outside: string;
  let c: Confinement;

  beforeAll(() => {
    root = realpathSync(mkdtempSync(join(tmpdir(), "compass-confine-")));
    workspace = join(root, "workspace");
    scratch = join(root, "tmp");
    outside = join(root, "etc");
    for (const d of [workspace, scratch, outside, join(workspace, "src")]) mkdirSync(d, { recursive: true });
    writeFileSync(join(outside, "passwd"), "root:x:0:0\n");
    writeFileSync(join(workspace, "src", "a.ts"), "a\n");
    symlinkSync(outside, join(workspace, "etc-link"));
    symlinkSync(join(outside, "passwd"), join(workspace, "passwd-link"));
    symlinkSync(join(outside, "not-yet"), join(workspace, "dangling"));
    symlinkSync(join(workspace, "src"), join(workspace, "src-link"));
    c = confinement(workspace, [scratch]);
  });

  it("resolves relative paths from the workspace, existing or not yet", () => {
    expect(confinedPath("src/a.ts", c)).toBe(join(workspace, "src", "a.ts"));
    expect(confinedPath("new/dir/file.txt", c)).toBe(join(workspace, "new", "dir", "file.txt"));
    expect(confinedPath(".", c)).toBe(workspace);
  });

  it("accepts absolute paths inside the workspace and the scratch dir", () => {
    expect(confinedPath(join(workspace, "src", "a.ts"), c)).toBe(join(workspace, "src", "a.ts"));
    expect(confinedPath(join(scratch, "x.log"), c)).toBe(join(scratch, "x.log"));
  });

  it("follows a link that stays inside", () => {
    expect(confinedPath("src-link/a.ts", c)).toBe(join(workspace, "src", "a.ts"));
  });

  it.each([
    ["an absolute path elsewhere", () => join(outside, "passwd")],
    ["a climb out with ..", () => "../etc/passwd"],
    ["a climb out hidden mid-path", () => "src/../../etc/passwd"],
    ["a directory link pointing out", () => "etc-link/passwd"],
    ["a file link pointing out", () => "passwd-link"],
    ["a new file under a directory link pointing out", () => "etc-link/new.txt"],
    ["a dangling link (writing would create its target outside)", () => "dangling"],
    ["a sibling whose name starts like the root", () => `${workspace}-evil/x`],
    ["/", () => "/"],
    ["an empty path", () => ""],
    ["a path with NUL", () => "src/a.ts\0.png"],
  ])("refuses %s", (_what, path) => {
    expect(() => confinedPath(path(), c)).toThrow(PathOutsideWorkspace);
  });
});
