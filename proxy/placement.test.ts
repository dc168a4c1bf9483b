import { describe, expect, it } from "vitest";
import { chooseRunner } from "./placement.ts";
import type { RunnerRecord } from "./store/store.ts";

const runner = (name: string, capacity = 10): RunnerRecord => ({
  runner_id: `runner-${name}`,
  runner_name: name,
  engine: "docker",
  capacity,
  labels: {},
  last_seen_at: "",
});

describe("placement", () => {
  it("is UNAVAILABLE without a connected runner", () => {
    expect(chooseRunner([], new Map())).toMatchObject({ ok: false, code: "UNAVAILABLE" });
  });

  it("picks the only runner, else the least loaded relative to its capacity", () => {
    expect(chooseRunner([runner("a")], new Map())).toMatchObject({ ok: true, runner: { runner_name: "a" } });
    const load = new Map([
      ["runner-a", 5],
      ["runner-b", 2],
    ]);
    expect(chooseRunner([runner("a"), runner("b")], load)).toMatchObject({ runner: { runner_name: "b" } });
    expect(chooseRunner([runner("a", 100), runner("b", 4)], load)).toMatchObject({
      runner: { runner_name: "a" },
    });
  });

  it("is RESOURCE_EXHAUSTED when every runner is full", () => {
    expect(chooseRunner([runner("a", 1)], new Map([["runner-a", 1]]))).toMatchObject({
      ok: false,
      code: "RESOURCE_EXHAUSTED",
    });
  });
});
