import { describe, expect, it } from "vitest";
import { decideRestart, type RestartPolicy } from "./restart-policy.ts";
import { defaultSettings } from "../config.ts";

const policy: RestartPolicy = { backoffMs: 1_000, maxBackoffMs: 5_000, maxRestarts: 3, resetAfterMs: 60_000 };
const t0 = new Date("2026-12-01T12:00:00.000Z");
const later = (ms: number) => new Date(t0.getTime() + ms);

describe("decideRestart", () => {
  it("restarts a first exit at once", () => {
    expect(decideRestart(policy, { consecutive: 0, lastRestartAt: undefined }, t0)).toEqual({
      action: "restart",
      delayMs: 0,
      consecutive: 1,
      restartAt: "2026-12-01T12:00:00.000Z",
    });
  });

  it("backs off from the second exit in a row: the base delay", () => {
    const history = { consecutive: 1, lastRestartAt: t0.toISOString() };
    expect(decideRestart(policy, history, later(500))).toEqual({
      action: "restart",
      delayMs: 1_000,
      consecutive: 2,
      restartAt: "2026-12-01T12:00:01.500Z",
    });
  });

  it("doubles the delay for each restart in a row after the first, up to the cap", () => {
    const delays: number[] = [];
    let history = { consecutive: 0, lastRestartAt: undefined as string | undefined };
    const wide = { ...policy, maxRestarts: 10 };
    for (let i = 0; i < 5; i++) {
      const d = decideRestart(wide, history, later(i * 1_000));
      if (d.action !== "restart") throw new Error("expected a restart");
      delays.push(d.delayMs);
      history = { consecutive: d.consecutive, lastRestartAt: d.restartAt };
    }
    expect(delays).toEqual([0, 1_000, 2_000, 4_000, 5_000]);
  });

  it("is CrashLoop once maxRestarts restarts in a row did not hold", () => {
    const history = { consecutive: 3, lastRestartAt: later(10_000).toISOString() };
    expect(decideRestart(policy, history, later(20_000))).toEqual({ action: "crashLoop", consecutive: 3 });
  });

  it("forgets earlier restarts after the session ran undisturbed for resetAfterMs", () => {
    const history = { consecutive: 3, lastRestartAt: t0.toISOString() };
    expect(decideRestart(policy, history, later(60_000))).toMatchObject({
      action: "restart",
      consecutive: 1,
      delayMs: 0,
    });
  });

  it("defaults like a kubelet's back-off: the first at once, then 1 s doubling to 60 s, five restarts, reset after 10 minutes", () => {
    expect(defaultSettings().restartPolicy).toEqual({
      backoffMs: 1_000,
      maxBackoffMs: 60_000,
      maxRestarts: 5,
      resetAfterMs: 600_000,
    });
  });
});
