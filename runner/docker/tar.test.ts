import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, symlinkSync, writeFileSync, mkdirSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { TAR_END, readTar, tarHeader, tarPadding } from "./tar.ts";

async function* chunks(buffer: Buffer, size: number): AsyncGenerator<Buffer> {
  for (let i = 0; i < buffer.length; i += size) yield buffer.subarray(i, i + size);
}

describe("tar", () => {
  it("what it writes GNU tar extracts: directories, a long name, the content byte for byte", () => {
    const long = `${"d".repeat(60)}/${"f".repeat(80)}.bin`;
    const content = Buffer.from("x".repeat(1000));
    const archive = Buffer.concat([
      tarHeader({ name: "d".repeat(60), type: "dir", size: 0, mode: 0o755, uid: 0, gid: 0, mtime: 1 }),
      tarHeader({ name: long, type: "file", size: content.length, mode: 0o644, uid: 0, gid: 0, mtime: 1 }),
      content,
      tarPadding(content.length),
      TAR_END,
    ]);
    const dir = mkdtempSync(join(tmpdir(), "tar-test-"));
    writeFileSync(join(dir, "a.tar"), archive);
    execFileSync("tar", ["-xf", "a.tar"], { cwd: dir });
    expect(readFileSync(join(dir, long)).equals(content)).toBe(true);
  });

  it("reads GNU tar's entries in small pieces: names, types, sizes, links, and a body when asked", async () => {
    const dir = mkdtempSync(join(tmpdir(), "tar-test-"));
    mkdirSync(join(dir, "ws", `${"n".repeat(120)}`), { recursive: true });
    writeFileSync(join(dir, "ws", "a.txt"), "hello");
    writeFileSync(join(dir, "ws", "b.bin"), Buffer.alloc(70_000, 1));
    symlinkSync("/etc", join(dir, "ws", "out"));
    const archive = execFileSync("tar", ["-cf", "-", "ws"], { cwd: dir, maxBuffer: 1 << 24 });
    const seen: Record<string, [string, number, string]> = {};
    let text = "";
    for await (const { header, body } of readTar(chunks(archive, 333))) {
      seen[header.name] = [header.type, header.size, header.linkname];
      if (header.name === "ws/a.txt") for await (const b of body()) text += b.toString();
    }
    expect(text).toBe("hello");
    expect(seen).toEqual({
      ws: ["dir", 0, ""],
      [`ws/${"n".repeat(120)}`]: ["dir", 0, ""],
      "ws/a.txt": ["file", 5, ""],
      "ws/b.bin": ["file", 70_000, ""],
      "ws/out": ["symlink", 0, "/etc"],
    });
  });
});
