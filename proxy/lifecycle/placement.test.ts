import { describe, expect, it } from "vitest";
import { chooseRunner, UNSCHEDULABLE } from "./placement.ts";
import type { RunnerRecord } from "../store/store.ts";

const runner = (
  name: string,
  capacity = 10,
  labels: Record<string, string> = {},
  draining = false,
): RunnerRecord => ({
  runner_id: `runner-${name}`,
  runner_name: name,
  engine: "docker",
  capacity,
  labels,
  draining,
  last_seen_at: "",
});

const placedOn = (placement: ReturnType<typeof chooseRunner>) =>
  placement.ok ? placement.runner.runner_name : `${placement.code}: ${placement.message}`;

describe("placement", () => {
  it("is UNAVAILABLE without a connected runner", () => {
    expect(chooseRunner([], new Map())).toMatchObject({ ok: false, code: "UNAVAILABLE" });
    expect(chooseRunner([], new Map(), { zone: "a" })).toMatchObject({ ok: false, code: "UNAVAILABLE" });
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

  it("breaks ties by runner name, whatever order the runners come in", () => {
    expect(placedOn(chooseRunner([runner("b"), runner("a")], new Map()))).toBe("a");
    expect(placedOn(chooseRunner([runner("a"), runner("b")], new Map()))).toBe("a");
  });

  it("is RESOURCE_EXHAUSTED when every runner is full, naming each with its load", () => {
    const placement = chooseRunner(
      [runner("a", 1), runner("b", 2)],
      new Map([
        ["runner-a", 1],
        ["runner-b", 2],
      ]),
    );
    expect(placement).toMatchObject({
      ok: false,
      code: "RESOURCE_EXHAUSTED",
      details: { reason: UNSCHEDULABLE },
    });
    expect(placement.ok ? "" : placement.message).toContain("a (1/1), b (2/2)");
  });

  it("places only on runners whose labels include every key of the selector with its value", () => {
    const runners = [runner("a", 10, { zone: "a", disk: "ssd" }), runner("b", 10, { zone: "b" })];
    const load = new Map([["runner-b", 9]]);
    expect(placedOn(chooseRunner(runners, new Map([["runner-a", 9]]), { zone: "b" }))).toBe("b");
    expect(placedOn(chooseRunner(runners, load, { zone: "a", disk: "ssd" }))).toBe("a");
    // An empty selector matches any runner: the least loaded.
    expect(placedOn(chooseRunner(runners, load, {}))).toBe("a");
    // A label with the right key and another value does not match; nor does an absent key.
    const unmatched: Record<string, string>[] = [{ zone: "c" }, { zone: "b", disk: "ssd" }, { gpu: "" }];
    for (const selector of unmatched) {
      const placement = chooseRunner(runners, new Map(), selector);
      expect(placement).toMatchObject({
        ok: false,
        code: "FAILED_PRECONDITION",
        details: { reason: UNSCHEDULABLE, runner_selector: selector },
      });
    }
  });

  it("names the selector and what is connected when nothing matches", () => {
    const placement = chooseRunner(
      [runner("a", 10, { zone: "a" }), runner("b", 10, { zone: "b" })],
      new Map(),
      {
        zone: "c",
      },
    );
    expect(placement.ok ? "" : placement.message).toBe(
      "no connected runner matches runnerSelector {zone=c}; connected: a {zone=a}, b {zone=b}",
    );
  });

  it("never places on a draining runner, however empty; all matches draining → FAILED_PRECONDITION", () => {
    const runners = [runner("a", 10, { zone: "a" }, true), runner("b", 10, { zone: "b" })];
    expect(placedOn(chooseRunner(runners, new Map([["runner-b", 9]])))).toBe("b");
    const placement = chooseRunner(runners, new Map(), { zone: "a" });
    expect(placement).toMatchObject({
      ok: false,
      code: "FAILED_PRECONDITION",
      message: "every connected runner matching runnerSelector {zone=a} is draining: a",
      details: { reason: UNSCHEDULABLE, runner_selector: { zone: "a" } },
    });
    expect(chooseRunner([runner("a", 10, {}, true)], new Map())).toMatchObject({
      ok: false,
      code: "FAILED_PRECONDITION",
      message: "every connected runner is draining: a",
    });
  });

  it("says which runners are full and which are draining when none can take the workspace", () => {
    const placement = chooseRunner([runner("a", 1), runner("b", 5, {}, true)], new Map([["runner-a", 1]]));
    expect(placement).toMatchObject({ ok: false, code: "RESOURCE_EXHAUSTED" });
    expect(placement.ok ? "" : placement.message).toBe(
      "every connected runner that takes placements is at capacity: a (1/1); draining: b",
    );
  });

  it("fills runners of different capacities in proportion", () => {
    const runners = [runner("small", 1), runner("big", 3)];
    const load = new Map<string, number>();
    const order: string[] = [];
    for (let i = 0; i < 4; i++) {
      const placement = chooseRunner(runners, load);
      if (!placement.ok) throw new Error(placement.message);
      order.push(placement.runner.runner_name);
      load.set(placement.runner.runner_id, (load.get(placement.runner.runner_id) ?? 0) + 1);
    }
    expect(order).toEqual(["big", "small", "big", "big"]);
    expect(chooseRunner(runners, load)).toMatchObject({ ok: false, code: "RESOURCE_EXHAUSTED" });
  });

  it("with an engine requirement (the paused tier) takes only runners of those engines, least loaded among them", () => {
    const kube = { ...runner("k"), runner_id: "runner-k", engine: "kubernetes" as const };
    const dock = runner("d");
    const engines = { allowed: ["docker"] as const, why: "the paused tier" };
    expect(placedOn(chooseRunner([kube, dock], new Map([["runner-d", 5]])))).toBe("k");
    expect(placedOn(chooseRunner([kube, dock], new Map([["runner-d", 5]]), undefined, engines))).toBe("d");
    const refused = chooseRunner([kube], new Map(), undefined, engines);
    expect(refused).toMatchObject({
      ok: false,
      code: "FAILED_PRECONDITION",
      details: { reason: UNSCHEDULABLE },
    });
    expect(placedOn(refused)).toMatch(
      /no connected runner runs docker \(the paused tier\); connected: k \(kubernetes\)/,
    );
  });
});
