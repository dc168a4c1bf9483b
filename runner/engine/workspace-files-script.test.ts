/**
 * The workspace files script (runner/engine/workspace-files-script.ts) run for real by this machine's
 * /bin/sh (dash, as in the test bed's base image) with GNU coreutils, find and tar, against a
 * temporary directory standing in for /workspace: what it writes, lists, reads and refuses.
 */
import { spawnSync } from "node:child_process";
import {
  mkdirSync,
  mkdtempSync,
  readFileSync,
  realpathSync,
  renameSync,
  rmSync,
  symlinkSync,
  writeFileSync,
  existsSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import fc from "fast-check";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { EXIT, filesScript } from "./workspace-files-script.ts";

let root: string;
let outside: string;
beforeEach(() => {
  root = realpathSync(mkdtempSync(join(tmpdir(), "ws-root-")));
  outside = realpathSync(mkdtempSync(join(tmpdir(), "ws-outside-")));
  writeFileSync(join(outside, "secret.txt"), "not yours\n");
});
afterEach(() => {
  rmSync(root, { recursive: true, force: true });
  rmSync(outside, { recursive: true, force: true });
});

function run(
  op: string,
  path: string,
  extra: string[] = [],
  input?: Buffer | string,
  env?: NodeJS.ProcessEnv,
) {
  const r = spawnSync("/bin/sh", ["-c", filesScript(root), "sh", op, path, ...extra], {
    ...(input !== undefined ? { input } : {}),
    ...(env ? { env } : {}),
    maxBuffer: 16 * 1024 * 1024,
  });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr.toString() };
}

describe("the workspace sidecar's files script", () => {
  it("writes exactly the announced bytes, parents created, and reads them back", () => {
    const body = Buffer.from("hello from the proxy\n");
    // More on stdin than announced: the script takes its size and stops (stdin never closes on v4).
    expect(
      run("write", "src/notes/hello.txt", [String(body.length)], Buffer.concat([body, Buffer.from("extra")]))
        .code,
    ).toBe(0);
    expect(readFileSync(join(root, "src/notes/hello.txt"), "utf8")).toBe("hello from the proxy\n");
    const read = run("file", "src/notes/hello.txt", ["1000"]);
    expect(read.code).toBe(0);
    expect(read.stdout.toString()).toBe("hello from the proxy\n");
    // Short input is refused and leaves nothing.
    expect(run("write", "short.txt", ["100"], "only a few").code).toBe(EXIT.short);
    expect(existsSync(join(root, "short.txt"))).toBe(false);
  });

  it("lists one level: type, size, mtime, name and a symlink's target, NUL-separated", () => {
    mkdirSync(join(root, "dir"));
    writeFileSync(join(root, "a.txt"), "12345");
    symlinkSync("a.txt", join(root, "link"));
    const out = run("list", "");
    expect(out.code).toBe(0);
    const fields = out.stdout.toString().split("\0");
    const entries = [];
    for (let i = 0; i + 5 <= fields.length; i += 5) entries.push([fields[i], fields[i + 3], fields[i + 4]]);
    expect(entries.sort((x, y) => String(x[1]).localeCompare(String(y[1])))).toEqual([
      ["f", "a.txt", ""],
      ["d", "dir", ""],
      ["l", "link", "a.txt"],
    ]);
    expect(run("list", "a.txt").code).toBe(EXIT.notDir);
    expect(run("list", "nope").code).toBe(EXIT.missing);
  });

  it("refuses every way out through a symlink, and writes nothing outside", () => {
    symlinkSync(outside, join(root, "out"));
    symlinkSync(join(outside, "secret.txt"), join(root, "secret-link"));
    expect(run("file", "out/secret.txt", ["1000"]).code).toBe(EXIT.outside);
    expect(run("file", "secret-link", ["1000"]).code).toBe(EXIT.outside);
    expect(run("list", "out").code).toBe(EXIT.outside);
    expect(run("archive", "out").code).toBe(EXIT.outside);
    // Writes and deletes follow no symlink at all (nor its target's directory), however it points.
    expect(run("write", "out/evil", ["1"], "x").code).toBe(EXIT.symlink);
    expect(run("write", "secret-link", ["1"], "x").code).toBe(EXIT.symlink);
    expect(run("delete", "out/secret.txt").code).toBe(EXIT.symlink);
    expect(readFileSync(join(outside, "secret.txt"), "utf8")).toBe("not yours\n");
    expect(existsSync(join(outside, "evil"))).toBe(false);
    // The link itself is the workspace's own entry: deleting it removes the link, not its target.
    expect(run("delete", "out").code).toBe(0);
    expect(existsSync(join(root, "out"))).toBe(false);
    expect(existsSync(join(outside, "secret.txt"))).toBe(true);
  });

  it("tells a directory, a file over the limit, a file where a parent should be, and the root itself", () => {
    mkdirSync(join(root, "dir"));
    writeFileSync(join(root, "big.bin"), Buffer.alloc(2048));
    expect(run("file", "dir", ["1000"]).code).toBe(EXIT.isDir);
    const big = run("file", "big.bin", ["1000"]);
    expect(big.code).toBe(EXIT.tooLarge);
    expect(big.stderr.trim()).toBe("2048");
    expect(big.stdout.length).toBe(0);
    expect(run("write", "dir", ["1"], "x").code).toBe(EXIT.isDir);
    expect(run("write", "big.bin/child", ["1"], "x").code).toBe(EXIT.notDir);
    expect(run("write", "", ["1"], "x").code).toBe(EXIT.root);
    expect(run("delete", "").code).toBe(EXIT.root);
    expect(run("delete", "missing").code).toBe(EXIT.missing);
    expect(existsSync(root)).toBe(true);
  });

  it("archives the root itself when the root's parent is / (as /workspace's is)", () => {
    // A root directly under / (the machine's tests run as root, as CI does): "//workspace" was
    // taken for a way out, and `:archive?path=` of a whole workspace refused.
    const top = realpathSync(mkdtempSync("/ws-top-"));
    try {
      writeFileSync(join(top, "x.txt"), "x\n");
      const r = spawnSync("/bin/sh", ["-c", filesScript(top), "sh", "archive", ""]);
      expect(r.stderr.toString()).toBe("");
      expect(r.status).toBe(0);
      const listing = spawnSync("tar", ["-t"], { input: r.stdout }).stdout.toString().split("\n");
      const name = top.slice(1);
      expect(listing.filter(Boolean).sort()).toEqual([`${name}/`, `${name}/x.txt`]);
    } finally {
      rmSync(top, { recursive: true, force: true });
    }
  });

  it("archives a directory as a tar named after it", () => {
    mkdirSync(join(root, "src"));
    writeFileSync(join(root, "src/x.txt"), "x\n");
    const tar = run("archive", "src");
    expect(tar.code).toBe(0);
    const listing = spawnSync("tar", ["-t"], { input: tar.stdout }).stdout.toString().split("\n").sort();
    expect(listing.filter(Boolean)).toEqual(["src/", "src/x.txt"]);
  });

  it("reads nothing outside when a directory is swapped for a symlink right after the path was resolved (issue 34 item 17)", () => {
    // The race made deterministic: a `realpath` first on PATH resolves, then swaps `dir` for a
    // link to the outside, as an agent racing the read would between the check and the open.
    mkdirSync(join(root, "dir"));
    writeFileSync(join(root, "dir/secret.txt"), "yours\n");
    const bin = mkdtempSync(join(tmpdir(), "ws-bin-"));
    const realRealpath = spawnSync("sh", ["-c", "command -v realpath"]).stdout.toString().trim();
    writeFileSync(
      join(bin, "realpath"),
      `#!/bin/sh\nr=$(${realRealpath} "$@") || exit 1\nrm -rf "${root}/dir" && ln -s "${outside}" "${root}/dir"\nprintf '%s\\n' "$r"\n`,
      { mode: 0o755 },
    );
    const env = { ...process.env, PATH: `${bin}:${process.env.PATH ?? ""}` };
    try {
      const file = run("file", "dir/secret.txt", ["1000"], undefined, env);
      expect(file.stdout.toString()).not.toContain("not yours");
      expect(file.code).toBe(EXIT.outside);
      rmSync(join(root, "dir"), { force: true });
      mkdirSync(join(root, "dir"));
      const archive = run("archive", "dir/secret.txt", [], undefined, env);
      expect(archive.stdout.toString()).not.toContain("not yours");
      expect(archive.code).toBe(EXIT.outside);
      rmSync(join(root, "dir"), { force: true });
      mkdirSync(join(root, "dir"));
      const list = run("list", "dir", [], undefined, env);
      expect(list.stdout.toString()).not.toContain("secret.txt");
      expect(list.code).toBe(EXIT.outside);
    } finally {
      rmSync(bin, { recursive: true, force: true });
    }
  });

  it("refuses a write or delete through a symlink that stays inside, and writes nothing through it", () => {
    mkdirSync(join(root, "real"));
    writeFileSync(join(root, "real/kept.txt"), "kept\n");
    symlinkSync("real", join(root, "alias"));
    symlinkSync("real/kept.txt", join(root, "kept-link"));
    expect(run("write", "alias/new.txt", ["1"], "x").code).toBe(EXIT.symlink);
    expect(run("write", "kept-link", ["1"], "x").code).toBe(EXIT.symlink);
    expect(run("delete", "alias/kept.txt").code).toBe(EXIT.symlink);
    expect(
      spawnSync("ls", ["-A", join(root, "real")])
        .stdout.toString()
        .trim(),
    ).toBe("kept.txt");
    expect(readFileSync(join(root, "real/kept.txt"), "utf8")).toBe("kept\n");
    // The link itself is still an entry a delete removes, and a write may go through "real".
    expect(run("delete", "kept-link").code).toBe(0);
    expect(run("write", "real/new.txt", ["1"], "x").code).toBe(0);
    expect(readFileSync(join(root, "real/new.txt"), "utf8")).toBe("x");
  });

  it("writes and deletes nothing outside when a directory is swapped for a symlink between check and act (issue 34 item 17)", () => {
    // The race made deterministic: the first of the script's external tools to run (realpath
    // once it resolved, or mktemp or rm before they act) moves `dir` away and puts a link to the
    // outside in its place, as an agent racing the upload would (readlink, the check, is left alone).
    mkdirSync(join(root, "dir"));
    writeFileSync(join(root, "dir/secret.txt"), "yours\n");
    const bin = mkdtempSync(join(tmpdir(), "ws-bin-"));
    const marker = join(bin, "swapped");
    const which = (tool: string) =>
      spawnSync("sh", ["-c", `command -v ${tool}`])
        .stdout.toString()
        .trim();
    const [mv, ln, touch] = [which("mv"), which("ln"), which("touch")];
    const swap = `if [ ! -e "${marker}" ]; then ${touch} "${marker}"; ${mv} "${root}/dir" "${root}/dir.moved"; ${ln} -s "${outside}" "${root}/dir"; fi`;
    // realpath swaps right after it resolved (its answer is the check); the others before they act.
    writeFileSync(
      join(bin, "realpath"),
      `#!/bin/sh\nr=$(${which("realpath")} "$@") || exit 1\n${swap}\nprintf '%s\\n' "$r"\n`,
      { mode: 0o755 },
    );
    for (const tool of ["mktemp", "rm", "mkdir", "head", "mv", "stat", "chmod"])
      writeFileSync(join(bin, tool), `#!/bin/sh\n${swap}\nexec ${which(tool)} "$@"\n`, { mode: 0o755 });
    const env = { ...process.env, PATH: `${bin}:${process.env.PATH ?? ""}` };
    const reset = () => {
      rmSync(marker, { force: true });
      rmSync(join(root, "dir"), { recursive: true, force: true });
      if (existsSync(join(root, "dir.moved"))) renameSync(join(root, "dir.moved"), join(root, "dir"));
    };
    try {
      const write = run("write", "dir/evil", ["5"], "evil\n", env);
      expect(existsSync(marker)).toBe(true);
      expect(spawnSync("ls", ["-A", outside]).stdout.toString().trim()).toBe("secret.txt");
      // What was written landed in the directory the script entered, wherever it went since.
      expect({ code: write.code, moved: readFileSync(join(root, "dir.moved/evil"), "utf8") }).toEqual({
        code: 0,
        moved: "evil\n",
      });
      reset();
      const del = run("delete", "dir/secret.txt", [], undefined, env);
      expect(existsSync(marker)).toBe(true);
      expect(readFileSync(join(outside, "secret.txt"), "utf8")).toBe("not yours\n");
      expect(del.code).toBe(0);
      expect(existsSync(join(root, "dir.moved/secret.txt"))).toBe(false);
    } finally {
      rmSync(bin, { recursive: true, force: true });
    }
  });

  it("creates nothing outside when the upload's temporary file is swapped for a dangling link right after mktemp", () => {
    const bin = mkdtempSync(join(tmpdir(), "ws-bin-"));
    const which = (tool: string) =>
      spawnSync("sh", ["-c", `command -v ${tool}`])
        .stdout.toString()
        .trim();
    // mktemp makes the file, then the "agent" replaces it with a link to a name outside that does not exist yet.
    writeFileSync(
      join(bin, "mktemp"),
      `#!/bin/sh\nt=$(${which("mktemp")} "$@") || exit 1\n${which("rm")} -f "$t"; ${which("ln")} -s "${outside}/created" "$t"\nprintf '%s\\n' "$t"\n`,
      { mode: 0o755 },
    );
    try {
      const r = run("write", "a.txt", ["1"], "x", {
        ...process.env,
        PATH: `${bin}:${process.env.PATH ?? ""}`,
      });
      expect(spawnSync("ls", ["-A", outside]).stdout.toString().trim()).toBe("secret.txt");
      expect(r.code).toBe(EXIT.symlink);
      expect(spawnSync("ls", ["-A", root]).stdout.toString().trim()).toBe("");
    } finally {
      rmSync(bin, { recursive: true, force: true });
    }
  });

  it("never touches anything outside the root for arbitrary confined paths (fast-check)", () => {
    const segment = fc.constantFrom("a", "b", "out", ".hidden", "x y", "ü", "-n", "*");
    fc.assert(
      fc.property(
        fc.array(segment, { minLength: 1, maxLength: 4 }),
        fc.constantFrom("write", "delete"),
        (segments, op) => {
          rmSync(join(root, "out"), { recursive: true, force: true });
          symlinkSync(outside, join(root, "out"));
          const path = segments.join("/");
          const r = run(op, path, op === "write" ? ["1"] : [], "z");
          // Only the root's `out` leads out (a deeper `out` is an ordinary entry); deleting `out` itself is fine.
          if (segments[0] === "out" && (op === "write" || segments.length > 1))
            expect(r.code).toBe(EXIT.symlink);
          expect(readFileSync(join(outside, "secret.txt"), "utf8")).toBe("not yours\n");
          expect(spawnSync("ls", ["-A", outside]).stdout.toString().trim()).toBe("secret.txt");
        },
      ),
      { numRuns: 60 },
    );
  });
});
