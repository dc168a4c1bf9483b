import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import {
  TRANSCRIPT_FILE,
  TRANSCRIPT_MAX_TURNS,
  TRANSCRIPT_TEXT_MAX,
} from "../../contracts/session-transcript.ts";
import { TranscriptFile } from "./transcript.ts";

const turn = (n: number) => ({
  id: `r${n}`,
  at: "2026-12-06T12:00:00.000Z",
  input: `ask ${n}`,
  outcome: "succeeded" as const,
  output: `answer ${n}`,
});

describe("the adapter's transcript file", () => {
  it("keeps the last turns on the volume and continues them after a restart", () => {
    const dir = mkdtempSync(join(tmpdir(), "transcript-"));
    const first = new TranscriptFile(dir);
    for (let n = 1; n <= TRANSCRIPT_MAX_TURNS + 5; n++) first.add(turn(n));
    const onDisk = JSON.parse(readFileSync(join(dir, TRANSCRIPT_FILE), "utf8"));
    expect(onDisk.turns).toHaveLength(TRANSCRIPT_MAX_TURNS);
    expect(onDisk.turns[0].id).toBe("r6");
    const again = new TranscriptFile(dir);
    again.add(turn(99));
    expect(again.turns.at(-1)?.id).toBe("r99");
    expect(again.turns.at(-2)?.id).toBe(`r${TRANSCRIPT_MAX_TURNS + 5}`);
  });

  it("cuts long texts and says so; a damaged file starts a new transcript", () => {
    const dir = mkdtempSync(join(tmpdir(), "transcript-"));
    writeFileSync(join(dir, TRANSCRIPT_FILE), "{not json");
    const t = new TranscriptFile(dir);
    expect(t.turns).toEqual([]);
    t.add({ ...turn(1), output: "x".repeat(TRANSCRIPT_TEXT_MAX + 10) });
    expect(t.turns[0]?.output).toHaveLength(TRANSCRIPT_TEXT_MAX);
    expect(t.turns[0]?.cut).toBe(true);
  });
});
