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

  it("answers a pause once the workload is frozen, without waiting for the engine's memory read", async () => {
    let answer: (bytes: number) => void = () => undefined;
    driver.memoryBytes = () => new Promise((resolve) => (answer = resolve));
    const paused = new PausedWorkloads(driver, { budgetBytes: 1 });
    // The read never answers until told: a pause waiting for it would never resolve.
    await paused.pause("a");
    expect(machine.paused.has("a")).toBe(true);
    // The memory comes apart, and feeds the budget then.
    const memory = paused.memory("a");
    answer(5);
    expect(await memory).toEqual({ memoryBytes: 5, evict: ["a"] });
  });

  it("names the least recently paused to evict when paused memory is over the budget, never a running one", async () => {
    for (const name of ["a", "b", "c"]) machine.memory.set(name, 100 * MiB);
    let t = 0;
    const paused = new PausedWorkloads(driver, { budgetBytes: 250 * MiB, now: () => ++t });
    await paused.pause("a");
    expect((await paused.memory("a")).evict).toEqual([]);
    await paused.pause("b");
    expect((await paused.memory("b")).evict).toEqual([]);
    await paused.pause("c");
    const third = await paused.memory("c");
    expect(third.memoryBytes).toBe(100 * MiB);
    expect(third.evict).toEqual(["a"]);
    // b woke and was paused again: a is still the least recently paused, then c.
    await paused.thaw("b");
    await paused.pause("b");
    expect(paused.list()).toEqual(["a", "c", "b"]);
  });

  it("reads each paused workload's memory once per pause (a frozen workload's memory does not change)", async () => {
    let reads = 0;
    driver.memoryBytes = async () => {
      reads++;
      return 100 * MiB;
    };
    const paused = new PausedWorkloads(driver, { budgetBytes: 1000 * MiB });
    for (const name of ["a", "b", "c"]) {
      await paused.pause(name);
      await paused.memory(name);
    }
    expect(reads).toBe(3);
    // Woken and paused again: read again.
    await paused.thaw("a");
    await paused.pause("a");
    await paused.memory("a");
    expect(reads).toBe(4);
  });

  it("without a budget never names one to evict", async () => {
    for (const name of ["a", "b", "c"]) machine.memory.set(name, 10_000 * MiB);
    const paused = new PausedWorkloads(driver);
    for (const name of ["a", "b", "c"]) {
      await paused.pause(name);
      expect((await paused.memory(name)).evict).toEqual([]);
    }
  });

  it("a restarted runner keeps what the engine holds frozen paused (and in its budget), and forgets what runs", async () => {
    for (const name of ["a", "b", "c"]) machine.memory.set(name, 100 * MiB);
    const file = join(dir, "paused-workloads.json");
    const before = new PausedWorkloads(driver, { file });
    await before.pause("a");
    await before.pause("b");
    // b was thawed outside meanwhile; c (a session's workload) is frozen though not in the file.
    machine.paused.delete("b");
    machine.paused.add("c");
    const after = new PausedWorkloads(new FakeDriver({ machine }), { file, budgetBytes: 150 * MiB });
    expect(await after.adopt(["b", "c", "gone"])).toEqual(["a", "c"]);
    expect([...machine.paused].sort()).toEqual(["a", "c"]);
    expect(after.has("a") && after.has("c") && !after.has("b")).toBe(true);
    // Counted in the budget: the least recently paused (a, from before the restart) goes first.
    await after.pause("b");
    expect((await after.memory("b")).evict).toEqual(["a", "c"]);
    // The set on disk says the same to the next process.
    expect(await new PausedWorkloads(new FakeDriver({ machine }), { file }).adopt([])).toEqual([
      "a",
      "c",
      "b",
    ]);
  });

  it("thaws a paused workload for work that needs it alive, then freezes it again in its place", async () => {
    const paused = new PausedWorkloads(driver);
    await paused.pause("a");
    await paused.pause("b");
    const seen = await paused.whileThawed("a", async () => machine.paused.has("a"));
    expect(seen).toBe(false);
    expect(machine.paused.has("a")).toBe(true);
    expect(paused.list()).toEqual(["a", "b"]);
    expect(await paused.whileThawed("c", async () => "ran")).toBe("ran");
    expect(machine.paused.has("c")).toBe(false);
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
