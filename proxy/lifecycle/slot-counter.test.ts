import { describe, expect, it } from "vitest";
import { SlotCounter } from "./slot-counter.ts";

describe("SlotCounter", () => {
  it("takes several keys all or none: a full one leaves no slot held on the others", () => {
    const slots = new SlotCounter(1);
    const a = slots.acquire(["a"]);
    expect(a.ok).toBe(true);
    expect(slots.acquire(["b", "a"])).toEqual({ ok: false, key: "a", held: 1 });
    // "b" was not taken by the refusal above.
    expect(slots.acquire(["b"]).ok).toBe(true);
  });

  it("gives a slot back once, however many times its release is called", () => {
    const slots = new SlotCounter(2);
    const first = slots.acquire(["a"]);
    const second = slots.acquire(["a"]);
    if (!first.ok || !second.ok) throw new Error("expected two slots");
    first.release();
    first.release();
    expect(slots.acquire(["a"]).ok).toBe(true);
    expect(slots.acquire(["a"]).ok).toBe(false);
  });
});
