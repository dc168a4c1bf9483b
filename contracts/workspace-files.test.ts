import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  WorkspaceEntry,
  WorkspaceListing,
  absoluteWorkspacePath,
  confineWorkspacePath,
  isInsideWorkspace,
} from "./workspace-files.ts";

const refused = (raw: string) => {
  try {
    confineWorkspacePath(raw);
    return undefined;
  } catch (error) {
    return (error as { code?: string }).code;
  }
};

/** Resolves `..` the way a filesystem would, from /workspace. */
function resolved(raw: string): string {
  const parts: string[] = raw.startsWith("/") ? [] : ["workspace"];
  for (const s of raw.split("/")) {
    if (s === "" || s === ".") continue;
    if (s === "..") parts.pop();
    else parts.push(s);
  }
  return `/${parts.join("/")}`;
}

describe("confineWorkspacePath", () => {
  it("normalizes relative and /workspace-absolute paths to one relative form", () => {
    expect(confineWorkspacePath("")).toBe("");
    expect(confineWorkspacePath("/workspace")).toBe("");
    expect(confineWorkspacePath("/workspace/")).toBe("");
    expect(confineWorkspacePath("src/a.txt")).toBe("src/a.txt");
    expect(confineWorkspacePath("./src//a.txt/")).toBe("src/a.txt");
    expect(confineWorkspacePath("/workspace/src/./a.txt")).toBe("src/a.txt");
    expect(confineWorkspacePath("..a/b..")).toBe("..a/b..");
    expect(absoluteWorkspacePath("src/a.txt")).toBe("/workspace/src/a.txt");
    expect(absoluteWorkspacePath("")).toBe("/workspace");
  });

  it("refuses escapes with INVALID_ARGUMENT and a message naming the path", () => {
    for (const bad of [
      "..",
      "../etc/passwd",
      "a/../../b",
      "a/..",
      "/etc/passwd",
      "/workspacefoo",
      "/",
      "a\0b",
      "a\\..\\b",
    ])
      expect([bad, refused(bad)]).toEqual([bad, "INVALID_ARGUMENT"]);
    expect(() => confineWorkspacePath("/etc/passwd")).toThrow('path "/etc/passwd" is outside /workspace');
    expect(() => confineWorkspacePath("a/../..")).toThrow('leaves /workspace (contains "..")');
    expect(refused("a/".repeat(3000))).toBe("INVALID_ARGUMENT");
  });

  it("refuses a segment over 255 UTF-8 bytes (NAME_MAX) and accepts one at 255", () => {
    expect(confineWorkspacePath(`d/${"a".repeat(255)}`)).toBe(`d/${"a".repeat(255)}`);
    expect(() => confineWorkspacePath(`d/${"a".repeat(300)}`)).toThrow(
      "has a segment longer than 255 bytes (300",
    );
    expect(refused("é".repeat(128))).toBe("INVALID_ARGUMENT");
  });

  it("whatever it accepts resolves inside /workspace (fast-check over segment soup)", () => {
    const segment = fc.constantFrom("..", ".", "", "a", "b c", "workspace", "etc", "..x", "%2e%2e");
    const path = fc
      .tuple(fc.boolean(), fc.array(segment, { maxLength: 8 }))
      .map(([abs, segs]) => `${abs ? "/" : ""}${segs.join("/")}`);
    fc.assert(
      fc.property(path, (raw) => {
        const code = refused(raw);
        if (code !== undefined) return code === "INVALID_ARGUMENT";
        const confined = confineWorkspacePath(raw);
        return (
          isInsideWorkspace(absoluteWorkspacePath(confined)) &&
          resolved(raw) === absoluteWorkspacePath(confined) &&
          !confined.split("/").includes("..")
        );
      }),
      { numRuns: 2000 },
    );
  });

  it("isInsideWorkspace tells a symlink target in from one out", () => {
    expect(isInsideWorkspace("/workspace")).toBe(true);
    expect(isInsideWorkspace("/workspace/a/b")).toBe(true);
    expect(isInsideWorkspace("/workspace/a/../../etc")).toBe(false);
    expect(isInsideWorkspace("/etc")).toBe(false);
    expect(isInsideWorkspace("/workspaces")).toBe(false);
  });
});

describe("workspace listing contract", () => {
  it("takes what the runner lists and refuses an entry without a name or a known type", () => {
    const entry = { name: "a.txt", type: "file", size: 3, mtime: "2026-12-01T00:00:00.000Z" };
    expect(WorkspaceListing.parse({ path: "", entries: [entry] })).toEqual({ path: "", entries: [entry] });
    expect(WorkspaceEntry.safeParse({ ...entry, name: "" }).success).toBe(false);
    expect(WorkspaceEntry.safeParse({ ...entry, type: "fifo" }).success).toBe(false);
    expect(WorkspaceEntry.safeParse({ ...entry, size: -1 }).success).toBe(false);
  });
});
