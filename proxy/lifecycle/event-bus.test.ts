import { describe, expect, it } from "vitest";
import { EventBus } from "./event-bus.ts";
import type { StoredFrame } from "../store/store.ts";

const frame = (id: number, session_id: string): StoredFrame => ({
  id,
  frame: {
    protocol: "compass.v1",
    seq: id,
    session_id,
    type: "log",
    ts: "2026-01-01T00:00:00.000Z",
    payload: {},
  },
});

describe("EventBus", () => {
  it("wakes a session's followers with its frames only, and followers of everything with all", () => {
    const bus = new EventBus();
    const seen: Record<string, number[]> = { all: [], a: [], a2: [], b: [] };
    bus.subscribe((f) => seen.all?.push(f.id));
    const offA = bus.subscribe((f) => seen.a?.push(f.id), "ses-a");
    bus.subscribe((f) => seen.a2?.push(f.id), "ses-a");
    bus.subscribe((f) => seen.b?.push(f.id), "ses-b");
    expect(bus.size).toBe(4);
    bus.publish(frame(1, "ses-a"));
    bus.publish(frame(2, "ses-b"));
    bus.publish(frame(3, "ses-c"));
    offA();
    bus.publish(frame(4, "ses-a"));
    expect(seen).toEqual({ all: [1, 2, 3, 4], a: [1], a2: [1, 4], b: [2] });
    expect(bus.size).toBe(3);
  });

  it("forgets a session once its last follower left, and an unsubscribe twice is harmless", () => {
    const bus = new EventBus();
    const got: number[] = [];
    const off = bus.subscribe((f) => got.push(f.id), "ses-a");
    off();
    off();
    expect(bus.size).toBe(0);
    const again = bus.subscribe((f) => got.push(f.id), "ses-a");
    bus.publish(frame(1, "ses-a"));
    again();
    bus.publish(frame(2, "ses-a"));
    expect(got).toEqual([1]);
  });
});
