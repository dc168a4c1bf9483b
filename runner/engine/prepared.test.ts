import { afterEach, describe, expect, it, vi } from "vitest";
import { Prepared } from "./prepared.ts";

/** A Prepared of pod names whose disposals are recorded. */
function prepared(ttlMs = 1000) {
  const disposed: string[] = [];
  const kept = new Prepared<string>(ttlMs, async (pod) => {
    disposed.push(pod);
  });
  return { kept, disposed };
}

const settle = () => new Promise((r) => setImmediate(r));

describe("work prepared ahead of its operation", () => {
  afterEach(() => vi.useRealTimers());

  it("is handed over once to the operation asking for its key and tag, and not disposed of", async () => {
    const { kept, disposed } = prepared();
    kept.put("ws-a", "snap-1", Promise.resolve("pod-1"));
    expect(await kept.take("ws-a", "snap-1")).toBe("pod-1");
    expect(kept.take("ws-a", "snap-1")).toBeUndefined();
    await settle();
    expect(disposed).toEqual([]);
    expect(kept.size).toBe(0);
  });

  it("made for another tag is disposed of, not handed over", async () => {
    const { kept, disposed } = prepared();
    kept.put("ws-a", "snap-1", Promise.resolve("pod-1"));
    expect(kept.take("ws-a", "snap-2")).toBeUndefined();
    await settle();
    expect(disposed).toEqual(["pod-1"]);
    expect(kept.size).toBe(0);
  });

  it("replaced by a newer one of the same key is disposed of; other keys are kept apart", async () => {
    const { kept, disposed } = prepared();
    kept.put("ws-a", "snap-1", Promise.resolve("pod-1"));
    kept.put("ws-b", "snap-1", Promise.resolve("pod-b"));
    kept.put("ws-a", "snap-2", Promise.resolve("pod-2"));
    await settle();
    expect(disposed).toEqual(["pod-1"]);
    expect(await kept.take("ws-a", "snap-2")).toBe("pod-2");
    expect(await kept.take("ws-b", "snap-1")).toBe("pod-b");
  });

  it("not taken in time is disposed of, once its start ended", async () => {
    vi.useFakeTimers();
    const { kept, disposed } = prepared(1000);
    let started: (pod: string) => void = () => undefined;
    kept.put("ws-a", "snap-1", new Promise<string>((r) => (started = r)));
    await vi.advanceTimersByTimeAsync(1001);
    expect(kept.size).toBe(0);
    expect(disposed).toEqual([]);
    started("pod-1");
    await vi.advanceTimersByTimeAsync(0);
    expect(disposed).toEqual(["pod-1"]);
    expect(kept.take("ws-a", "snap-1")).toBeUndefined();
  });

  it("taken before its time is not disposed of when the time passes", async () => {
    vi.useFakeTimers();
    const { kept, disposed } = prepared(1000);
    kept.put("ws-a", "snap-1", Promise.resolve("pod-1"));
    expect(kept.take("ws-a", "snap-1")).toBeDefined();
    await vi.advanceTimersByTimeAsync(5000);
    expect(disposed).toEqual([]);
  });

  it("whose start failed is handed over as that failure, and disposed of as nothing", async () => {
    const { kept, disposed } = prepared();
    kept.put("ws-a", "snap-1", Promise.reject(new Error("no pod")));
    await expect(kept.take("ws-a", "snap-1")).rejects.toThrow("no pod");
    kept.put("ws-b", "snap-1", Promise.reject(new Error("no pod")));
    await kept.close();
    expect(disposed).toEqual([]);
  });

  it("are all disposed of at close", async () => {
    const { kept, disposed } = prepared();
    kept.put("ws-a", "snap-1", Promise.resolve("pod-1"));
    kept.put("ws-b", "snap-1", Promise.resolve("pod-2"));
    await kept.close();
    expect(disposed.sort()).toEqual(["pod-1", "pod-2"]);
    expect(kept.size).toBe(0);
  });
});
