import { describe, expect, it } from "vitest";
import { SessionSpec } from "../../contracts/session-spec.ts";
import { FastPathRecords, recordKey } from "./fast-path.ts";

const spec = SessionSpec.parse({
  namespace: "team",
  name: "s1",
  engine: "docker",
  image: `127.0.0.1:5000/agent-sessions/reference@sha256:${"a".repeat(64)}`,
  contract: "v1alpha2",
});
const secrets = { credentials: { MODEL_API_KEY: "k" }, adapterToken: "token-0123456789abcdef" };

function deferred() {
  let resolve!: () => void;
  let reject!: (e: Error) => void;
  const promise = new Promise<void>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

describe("recordKey", () => {
  it("is the same for the same spec at either scale, and differs with the spec, a credential or the token", () => {
    const key = recordKey(spec, secrets);
    expect(recordKey({ ...spec, replicas: 0 }, secrets)).toBe(key);
    expect(recordKey({ ...spec, env: { A: "1" } }, secrets)).not.toBe(key);
    expect(recordKey(spec, { ...secrets, credentials: { MODEL_API_KEY: "other" } })).not.toBe(key);
    expect(recordKey(spec, { ...secrets, adapterToken: "token-other-0123456789" })).not.toBe(key);
  });
});

describe("FastPathRecords", () => {
  it("settles at once with nothing pending, and after the pending recording otherwise", async () => {
    const records = new FastPathRecords(() => undefined);
    await records.settled("w");
    const up = deferred();
    let cleared = false;
    records.record(
      "w",
      { key: "k", replicas: 0 },
      () => up.promise,
      () => {
        cleared = true;
      },
    );
    // Unknown while the recording runs: nothing may take a fast path on a record not yet written.
    expect(records.get("w")).toBeUndefined();
    let settled = false;
    const waiting = records.settled("w").then(() => {
      settled = true;
    });
    await new Promise((r) => setTimeout(r, 10));
    expect(settled).toBe(false);
    up.resolve();
    await waiting;
    expect(cleared).toBe(true);
    expect(records.get("w")).toEqual({ key: "k", replicas: 0 });
  });

  it("leaves the workspace unknown after a failed recording, logged, the mark cleared", async () => {
    const logs: string[] = [];
    const records = new FastPathRecords((_level, msg) => logs.push(msg));
    records.set("w", { key: "k", replicas: 1 });
    let cleared = false;
    records.record(
      "w",
      { key: "k", replicas: 0 },
      () => Promise.reject(new Error("up failed")),
      () => {
        cleared = true;
      },
    );
    await records.settled("w");
    expect(records.get("w")).toBeUndefined();
    expect(cleared).toBe(true);
    expect(logs).toEqual(["recording a fast-path change in the stack failed"]);
  });

  it("waits for a recording that started while it waited for an earlier one", async () => {
    const records = new FastPathRecords(() => undefined);
    const first = deferred();
    const second = deferred();
    records.record(
      "w",
      { key: "k", replicas: 0 },
      () => first.promise,
      () => undefined,
    );
    let settled = false;
    const waiting = records.settled("w").then(() => {
      settled = true;
    });
    records.record(
      "w",
      { key: "k", replicas: 1 },
      () => second.promise,
      () => undefined,
    );
    first.resolve();
    await new Promise((r) => setTimeout(r, 10));
    expect(settled).toBe(false);
    second.resolve();
    await waiting;
    expect(records.get("w")).toEqual({ key: "k", replicas: 1 });
  });

  describe("scaleDown", () => {
    const running = { key: "k", replicas: 1 } as const;

    it("stops on the engine at once when the stack records replicas 1, and records replicas 0 behind it", async () => {
      const records = new FastPathRecords(() => undefined);
      records.set("w", running);
      const up = deferred();
      const calls: string[] = [];
      await records.scaleDown(
        "w",
        async () => {
          calls.push("fast");
          return () => calls.push("cleared");
        },
        () => {
          calls.push("stack");
          return up.promise;
        },
      );
      // Answered before the stack's `up` finished: that is the fast path.
      expect(calls).toEqual(["fast", "stack"]);
      expect(records.get("w")).toBeUndefined();
      up.resolve();
      await records.settled("w");
      expect(calls).toEqual(["fast", "stack", "cleared"]);
      expect(records.get("w")).toEqual({ key: "k", replicas: 0 });
    });

    it("takes the full path, awaited, when the record is unknown, already 0, the fast path is off or declines", async () => {
      for (const [recorded, fast] of [
        [undefined, async () => () => undefined],
        [{ key: "k", replicas: 0 }, async () => () => undefined],
        [running, undefined],
        [running, async () => undefined],
      ] as const) {
        const records = new FastPathRecords(() => undefined);
        if (recorded) records.set("w", recorded);
        let fastCalled = false;
        let stackDone = false;
        await records.scaleDown(
          "w",
          fast &&
            (() => {
              fastCalled = true;
              return fast();
            }),
          async () => {
            await new Promise((r) => setTimeout(r, 5));
            stackDone = true;
          },
        );
        expect(stackDone).toBe(true);
        expect(fastCalled).toBe(recorded?.replicas === 1 && fast !== undefined);
        expect(records.get("w")).toEqual(recorded ? { key: "k", replicas: 0 } : undefined);
      }
    });

    it("leaves the record unknown when the full path fails (the next operation reconciles)", async () => {
      const records = new FastPathRecords(() => undefined);
      records.set("w", { key: "k", replicas: 0 });
      await expect(
        records.scaleDown("w", undefined, () => Promise.reject(new Error("up failed"))),
      ).rejects.toThrow("up failed");
      expect(records.get("w")).toBeUndefined();
    });
  });
});
