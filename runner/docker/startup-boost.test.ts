import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type Docker from "dockerode";
import { describe, expect, it } from "vitest";
import { boostedNanoCpus, StartupBoosts } from "./startup-boost.ts";

describe("boostedNanoCpus", () => {
  it("raises to the boost's cores, never above the engine's", () => {
    expect(boostedNanoCpus(500_000_000, 2, 8)).toBe(2_000_000_000);
    expect(boostedNanoCpus(500_000_000, 4, 2)).toBe(2_000_000_000);
    expect(boostedNanoCpus(500_000_000, 1.5, 0)).toBe(1_500_000_000);
  });

  it("is no boost when off, when the declared limit is as much already, or when there is no limit", () => {
    expect(boostedNanoCpus(500_000_000, 0, 2)).toBeUndefined();
    expect(boostedNanoCpus(2_000_000_000, 2, 2)).toBeUndefined();
    expect(boostedNanoCpus(1_000_000_000, 4, 1)).toBeUndefined();
    expect(boostedNanoCpus(0, 2, 2)).toBeUndefined();
  });
});

/** An engine that keeps each container's NanoCpus (only what StartupBoosts calls). */
function engine(cores = 2, gone: string[] = []) {
  const nano = new Map<string, number>();
  const updates: [string, number][] = [];
  const docker = {
    info: async () => ({ NCPU: cores }),
    getContainer: (id: string) => ({
      update: async (opts: { NanoCpus: number }) => {
        if (gone.includes(id)) throw Object.assign(new Error("no such container"), { statusCode: 404 });
        nano.set(id, opts.NanoCpus);
        updates.push([id, opts.NanoCpus]);
      },
    }),
  } as unknown as Docker;
  return { docker, nano, updates };
}

describe("StartupBoosts", () => {
  it("raises a container while it starts and puts it back to its declared limit at its first answer", async () => {
    const e = engine(2);
    const boosts = new StartupBoosts(e.docker, { cores: 4, maxMs: 60_000 });
    await boosts.start("ws", "id1", 500_000_000);
    expect(e.nano.get("id1")).toBe(2_000_000_000);
    expect(boosts.has("ws")).toBe(true);
    await boosts.end("ws", "answered");
    expect(e.nano.get("id1")).toBe(500_000_000);
    expect(boosts.has("ws")).toBe(false);
    // A second answer changes nothing.
    await boosts.end("ws", "answered");
    expect(e.updates).toEqual([
      ["id1", 2_000_000_000],
      ["id1", 500_000_000],
    ]);
  });

  it("puts it back once the bound passes when no answer comes", async () => {
    const e = engine(2);
    const boosts = new StartupBoosts(e.docker, { cores: 2, maxMs: 20 });
    await boosts.start("ws", "id1", 250_000_000);
    expect(e.nano.get("id1")).toBe(2_000_000_000);
    await expect.poll(() => e.nano.get("id1")).toBe(250_000_000);
    expect(boosts.has("ws")).toBe(false);
  });

  it("does nothing when off or when the declared limit is not below the boost", async () => {
    const e = engine(2);
    await new StartupBoosts(e.docker, { cores: 0, maxMs: 10_000 }).start("a", "id1", 500_000_000);
    await new StartupBoosts(e.docker, { cores: 2, maxMs: 0 }).start("b", "id2", 500_000_000);
    await new StartupBoosts(e.docker, { cores: 2, maxMs: 10_000 }).start("c", "id3", 2_000_000_000);
    expect(e.updates).toEqual([]);
  });

  it("a new start of the same workspace first puts the previous container back", async () => {
    const e = engine(2);
    const boosts = new StartupBoosts(e.docker, { cores: 2, maxMs: 60_000 });
    await boosts.start("ws", "old", 500_000_000);
    await boosts.start("ws", "new", 500_000_000);
    expect(e.nano.get("old")).toBe(500_000_000);
    expect(e.nano.get("new")).toBe(2_000_000_000);
    await boosts.end("ws");
  });

  it("an answer that comes while the raise is under way still ends with the declared limit", async () => {
    const e = engine(2);
    const boosts = new StartupBoosts(e.docker, { cores: 2, maxMs: 60_000 });
    const started = boosts.start("ws", "id1", 500_000_000);
    const ended = boosts.end("ws", "answered");
    await Promise.all([started, ended]);
    expect(e.nano.get("id1")).toBe(500_000_000);
    expect(boosts.has("ws")).toBe(false);
  });

  it("keeps boosted containers on disk; a restarted runner puts each back, a gone one skipped", async () => {
    const file = join(mkdtempSync(join(tmpdir(), "boosts-")), "startup-boosts.json");
    const first = engine(2);
    const before = new StartupBoosts(first.docker, { cores: 2, maxMs: 60_000 }, { file });
    await before.start("a", "id-a", 500_000_000);
    await before.start("b", "id-b", 1_000_000_000);
    expect(JSON.parse(readFileSync(file, "utf8")).boosts).toHaveLength(2);
    // The process dies with both boosted; its successor (id-b was removed meanwhile):
    const after = engine(2, ["id-b"]);
    const reset = await new StartupBoosts(after.docker, { cores: 2, maxMs: 60_000 }, { file }).reset();
    expect(reset).toEqual(["a"]);
    expect(after.nano.get("id-a")).toBe(500_000_000);
    expect(JSON.parse(readFileSync(file, "utf8")).boosts).toEqual([]);
    for (const name of ["a", "b"]) before.forget(name);
  });

  it("a reset with no file, or an unreadable one, resets nothing", async () => {
    const dir = mkdtempSync(join(tmpdir(), "boosts-"));
    const e = engine(2);
    expect(
      await new StartupBoosts(e.docker, { cores: 2, maxMs: 1 }, { file: join(dir, "none") }).reset(),
    ).toEqual([]);
    writeFileSync(join(dir, "bad"), "{");
    expect(
      await new StartupBoosts(e.docker, { cores: 2, maxMs: 1 }, { file: join(dir, "bad") }).reset(),
    ).toEqual([]);
    expect(e.updates).toEqual([]);
  });

  it("a raise the engine refuses leaves the declared limit and forgets the boost", async () => {
    const e = engine(2, ["id1"]);
    const boosts = new StartupBoosts(e.docker, { cores: 2, maxMs: 60_000 });
    await boosts.start("ws", "id1", 500_000_000);
    expect(boosts.has("ws")).toBe(false);
  });
});
