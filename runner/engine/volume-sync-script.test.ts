/**
 * The volume sync (runner/engine/volume-sync-script.ts) run for real by this machine's /bin/sh
 * (dash, as in the test bed's base image) with GNU coreutils, find and tar, between temporary
 * directories standing in for the snapshot and the volume: the volume ends as the snapshot is,
 * what was alike is kept as it was, and a sync that cannot run falls back to the full replace.
 */
import { spawnSync } from "node:child_process";
import {
  chmodSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  statSync,
  symlinkSync,
  utimesSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, expect, it } from "vitest";
import { REPLACE_FUNCTION, SYNC_FELL_BACK, VOLUME_SYNC_SCRIPT } from "./volume-sync-script.ts";

let from: string;
let to: string;
let scratch: string;
beforeEach(() => {
  const base = mkdtempSync(join(tmpdir(), "volume-sync-"));
  from = join(base, "from");
  to = join(base, "to");
  scratch = join(base, "scratch");
  for (const d of [from, to, scratch]) mkdirSync(d);
});
afterEach(() => {
  for (const d of [from, to, scratch]) chmodSync(d, 0o755);
  rmSync(join(from, ".."), { recursive: true, force: true });
});

/** The copy scripts' way: the function, then `replace FROM TO SCRATCH`. */
function replace(scratchDir = scratch, stderr = ""): void {
  const script = `set -e\nVOLUME_SYNC=$1\n${REPLACE_FUNCTION}\nreplace "$2" "$3" "$4"`;
  const run = spawnSync("/bin/sh", ["-c", script, "sh", VOLUME_SYNC_SCRIPT, from, to, scratchDir]);
  expect(run.stderr.toString()).toBe(stderr);
  expect(run.status).toBe(0);
}

/** The sync alone (no fallback): its exit status. */
function syncAlone(scratchDir = scratch): number | null {
  return spawnSync("/bin/sh", ["-c", VOLUME_SYNC_SCRIPT, "sync", from, to, scratchDir]).status;
}

/** Every entry below `root`: type, mode, size of files, time, link target, content. */
function listing(root: string): string {
  const run = spawnSync(
    "/bin/sh",
    [
      "-c",
      `cd "$1" && find . -mindepth 1 \\( -type d -printf '%p d %m %T@\\n' \\) -o \\( -type f -printf '%p f %m %s %T@ ' -exec cksum {} \\; \\) -o -printf '%p %y %l %T@\\n' | LC_ALL=C sort`,
      "sh",
      root,
    ],
    { encoding: "utf8" },
  );
  expect(run.status).toBe(0);
  return run.stdout;
}

function snapshot(): void {
  mkdirSync(join(from, "data/deep"), { recursive: true });
  for (let i = 0; i < 20; i++) writeFileSync(join(from, `data/deep/f${i}`), `file ${i}\n`.repeat(i + 1));
  writeFileSync(join(from, "odd\nname with spaces"), "odd\n");
  symlinkSync("data/deep/f1", join(from, "link"));
  mkdirSync(join(from, "locked"));
  writeFileSync(join(from, "locked/in"), "in\n");
  chmodSync(join(from, "locked"), 0o555);
  const past = new Date("2025-01-02T03:04:05.123Z");
  utimesSync(join(from, "data/deep/f3"), past, past);
}

it("makes an empty volume the snapshot, modes, times and links included", () => {
  snapshot();
  replace();
  expect(listing(to)).toBe(listing(from));
  expect(syncAlone()).toBe(0);
});

it("keeps what is alike, replaces what differs, and removes what the snapshot does not hold", () => {
  snapshot();
  replace();
  const kept = statSync(join(to, "data/deep/f2")).ino;
  // Same size and time, other bytes: replaced.
  const f3 = join(to, "data/deep/f3");
  const { atime, mtime } = statSync(f3);
  writeFileSync(f3, readFileSync(f3).toString().replace("file", "FILE"));
  utimesSync(f3, atime, mtime);
  writeFileSync(join(to, "data/deep/f4"), "changed\n");
  chmodSync(join(to, "data/deep/f5"), 0o600);
  rmSync(join(to, "data/deep/f6"));
  rmSync(join(to, "link"));
  writeFileSync(join(to, "link"), "a file now\n");
  chmodSync(join(to, "locked"), 0o755);
  rmSync(join(to, "locked"), { recursive: true });
  writeFileSync(join(to, "locked"), "a file where a directory was\n");
  mkdirSync(join(to, "later/deeper"), { recursive: true });
  writeFileSync(join(to, "later/deeper/x"), "later\n");
  chmodSync(join(to, "later"), 0o555);
  writeFileSync(join(to, "data/later.txt"), "later\n");
  expect(syncAlone()).toBe(0);
  expect(listing(to)).toBe(listing(from));
  expect(statSync(join(to, "data/deep/f2")).ino).toBe(kept);
  expect(readFileSync(f3, "utf8")).toContain("file 3");
});

it("falls back to emptying the volume and copying all when the sync cannot run", () => {
  snapshot();
  mkdirSync(join(to, "later"));
  writeFileSync(join(to, "later/x"), "later\n");
  writeFileSync(join(to, "data"), "a file where a directory is\n");
  expect(syncAlone(join(scratch, "missing"))).not.toBe(0);
  replace(join(scratch, "missing"), `${SYNC_FELL_BACK}\n`);
  expect(listing(to)).toBe(listing(from));
});
