import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { FakeDriver, fakeMachine, type FakeMachine } from "./fake-driver.ts";
import { PausedWorkloads } from "./paused-workloads.ts";

const MiB = 1024 * 1024;
let dir: string;
let machine: FakeMachine;
let driver: FakeDriver;

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), "paused-"));
  machine = fakeMachine();
  driver = new FakeDriver({ machine });
  for (const name of ["a", "b", "c"]) machine.running.add(name);
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

describe("PausedWorkloads", () => {
  it("freezes a workload and thaws it once; thawing one it did not freeze does nothing", async () => {
    const paused = new PausedWorkloads(driver);
    await paused.pause("a");
    expect(machine.paused.has("a")).toBe(true);
    expect(paused.has("a")).toBe(true);
    expect(await paused.thaw("a")).toBe(true);
    expect(machine.paused.has("a")).toBe(false);
    expect(await paused.thaw("a")).toBe(false);
    expect(await paused.thaw("b")).toBe(false);
  });

  it("refuses to pause a workload that does not run, and keeps nothing of it", async () => {
    const paused = new PausedWorkloads(driver);
    await expect(paused.pause("gone")).rejects.toMatchObject({ code: "FAILED_PRECONDITION" });
    expect(paused.list()).toEqual([]);
  });

  it("names the least recently paused to evict when paused memory is over the budget, never a running one", async () => {
    for (const name of ["a", "b", "c"]) machine.memory.set(name, 100 * MiB);
    let t = 0;
    const paused = new PausedWorkloads(driver, { budgetBytes: 250 * MiB, now: () => ++t });
    expect((await paused.pause("a")).evict).toEqual([]);
    expect((await paused.pause("b")).evict).toEqual([]);
    const third = await paused.pause("c");
    expect(third.memoryBytes).toBe(100 * MiB);
    expect(third.evict).toEqual(["a"]);
    // b woke and was paused again: a is still the least recently paused, then c.
    await paused.thaw("b");
    await paused.pause("b");
    expect(paused.list()).toEqual(["a", "c", "b"]);
  });

  it("without a budget never names one to evict", async () => {
    for (const name of ["a", "b", "c"]) machine.memory.set(name, 10_000 * MiB);
    const paused = new PausedWorkloads(driver);
    for (const name of ["a", "b", "c"]) expect((await paused.pause(name)).evict).toEqual([]);
  });

  it("a restarted runner thaws what the previous process froze (the set is kept on disk)", async () => {
    const file = join(dir, "paused-workloads.json");
    const before = new PausedWorkloads(driver, { file });
    await before.pause("a");
    await before.pause("b");
    const after = new PausedWorkloads(new FakeDriver({ machine }), { file });
    expect(await after.thawSaved()).toEqual(["a", "b"]);
    expect([...machine.paused]).toEqual([]);
    expect(after.list()).toEqual([]);
    expect(await new PausedWorkloads(driver, { file }).thawSaved()).toEqual([]);
  });

  it("a thaw asked while a pause runs waits for it and thaws after it", async () => {
    const paused = new PausedWorkloads(driver);
    const pausing = paused.pause("a");
    const thawing = paused.thaw("a");
    await pausing;
    expect(await thawing).toBe(true);
    expect(machine.paused.has("a")).toBe(false);
  });
});
