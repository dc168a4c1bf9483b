import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import {
  interruptedRecordings,
  markRecording,
  recorded,
  recordingMarker,
  waitRecorded,
} from "./recording.ts";

const dir = mkdtempSync(join(tmpdir(), "recording-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe("a stack's pending recording", () => {
  it("is pending from the mark until it is cleared, and a waiter sees it clear", async () => {
    const done = markRecording(dir, "ns--a");
    expect(recorded(dir, "ns--a")).toBe(false);
    expect(await waitRecorded(dir, "ns--a", 150)).toBe(false);
    setTimeout(done, 100);
    expect(await waitRecorded(dir, "ns--a", 5_000)).toBe(true);
    expect(recorded(dir, "ns--a")).toBe(true);
  });

  it("stays pending while any of several marks of the stack is held", () => {
    const first = markRecording(dir, "ns--c");
    const second = markRecording(dir, "ns--c");
    first();
    first();
    expect(recorded(dir, "ns--c")).toBe(false);
    second();
    expect(recorded(dir, "ns--c")).toBe(true);
  });

  it("counts as recorded when the process that marked it is gone", () => {
    const gone = spawnSync(process.execPath, ["-e", "console.log(process.pid)"], { encoding: "utf8" });
    markRecording(dir, "ns--b");
    writeFileSync(recordingMarker(dir, "ns--b"), gone.stdout.trim());
    expect(recorded(dir, "ns--b")).toBe(true);
    // Left by a process that is gone: interrupted, for a restarted runner to record again.
    expect(interruptedRecordings(dir)).toEqual(["ns--b"]);
    const held = markRecording(dir, "ns--d");
    expect(interruptedRecordings(dir)).toEqual(["ns--b"]);
    held();
  });
});
