import { afterEach, describe, expect, it, vi } from "vitest";
import { HarnessWorkQueue } from "./harness-work-queue.ts";

const quiet = () => {};

describe("HarnessWorkQueue", () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it("coalesces reconciles of a session queued while one is waiting, and runs sessions one task at a time", async () => {
    const seen: string[] = [];
    let release = () => {};
    const busy = new Promise<void>((resolve) => {
      release = resolve;
    });
    const queue = new HarnessWorkQueue(async (namespace, name) => {
      seen.push(`${namespace}/${name}`);
    }, quiet);
    const holding = queue.run("ns", "a", () => busy);
    queue.enqueue("ns", "a");
    queue.enqueue("ns", "a");
    queue.enqueue("ns", "b");
    await vi.waitFor(() => expect(seen).toEqual(["ns/b"]));
    release();
    await holding;
    await vi.waitFor(() => expect(seen).toEqual(["ns/b", "ns/a"]));
  });

  it("logs a failed reconcile instead of throwing", async () => {
    const log = vi.fn();
    const queue = new HarnessWorkQueue(async () => {
      throw new Error("boom");
    }, log);
    queue.enqueue("ns", "a");
    await vi.waitFor(() =>
      expect(log).toHaveBeenCalledWith("error", "harness session reconcile failed", {
        namespace: "ns",
        name: "a",
        error: "Error: boom",
      }),
    );
  });

  it("schedules one later reconcile per session and reason, and none after close", async () => {
    vi.useFakeTimers();
    const seen: string[] = [];
    const queue = new HarnessWorkQueue(async (_namespace, name) => {
      seen.push(name);
    }, quiet);
    queue.later("restart", "ns", "a", 1_000);
    queue.later("restart", "ns", "a", 10);
    queue.later("reprobe", "ns", "b", 500);
    await vi.advanceTimersByTimeAsync(500);
    expect(seen).toEqual(["b"]);
    await vi.advanceTimersByTimeAsync(500);
    expect(seen).toEqual(["b", "a"]);
    queue.later("restart", "ns", "c", 100);
    queue.close();
    queue.later("reprobe", "ns", "d", 100);
    await vi.advanceTimersByTimeAsync(1_000);
    expect(seen).toEqual(["b", "a"]);
  });
});
