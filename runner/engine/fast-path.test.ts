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
    // The engine holds it at once (the next operation may act on it); the stack records it later.
    expect(records.get("w")).toEqual({ key: "k", replicas: 0 });
    expect(records.recorded("w")).toBeUndefined();
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
      expect(records.get("w")).toEqual({ key: "k", replicas: 0 });
      expect(records.recorded("w")).toEqual(running);
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

  describe("back to back", () => {
    /**
     * A fake engine and stack: each operation acts on `engine` at once and declares it; each
     * recording, when it starts, is told whether it is still the latest, and "records" the state
     * it was declared with — held until released, to line operations up behind it.
     */
    function bench() {
      const records = new FastPathRecords((_level, msg) => logs.push(msg));
      const logs: string[] = [];
      const started: (0 | 1)[] = [];
      const holds: ReturnType<typeof deferred>[] = [];
      let stack: 0 | 1 | undefined;
      let marks = 0;
      const engine = { replicas: 1 as 0 | 1 };
      records.set("w", { key: "k", replicas: 1 });
      const operate = (replicas: 0 | 1, fail?: Error) => {
        engine.replicas = replicas;
        marks++;
        records.record(
          "w",
          { key: "k", replicas },
          async ({ latest }) => {
            started.push(replicas);
            const hold = deferred();
            holds.push(hold);
            await hold.promise;
            if (fail) throw fail;
            // A stale recording may not act on the engine: it only records.
            if (!latest() && engine.replicas !== replicas) throw new Error("conflict");
            stack = replicas;
          },
          () => {
            marks--;
          },
        );
      };
      const releaseAll = async () => {
        for (let i = 0; i < 10 && holds.length > 0; i++) {
          holds.shift()?.resolve();
          await new Promise((r) => setTimeout(r, 1));
        }
        await records.settled("w");
      };
      return {
        records,
        logs,
        started,
        engine,
        operate,
        releaseAll,
        stack: () => stack,
        marks: () => marks,
      };
    }

    it("stop → resume → stop → resume: one recording runs, one is pending, the stack ends at the last state", async () => {
      const b = bench();
      for (const replicas of [0, 1, 0, 1] as const) b.operate(replicas);
      // Every operation was declared at once: the next one sees the engine's state, not the stack's.
      expect(b.records.get("w")).toEqual({ key: "k", replicas: 1 });
      expect(b.started).toEqual([0]);
      await b.releaseAll();
      // The first stop's recording, then only the latest state: the two in between never recorded.
      expect(b.started).toEqual([0, 1]);
      expect(b.stack()).toBe(1);
      expect(b.engine.replicas).toBe(1);
      expect(b.records.recorded("w")).toEqual({ key: "k", replicas: 1 });
      expect(b.marks()).toBe(0);
      // The stale stop found the engine at 1 and did not act on it (refused, logged as superseded).
      expect(b.logs).toEqual(["a superseded recording did not finish; recording the latest state"]);
    });

    it("a recording overtaken by a newer operation that fails is followed by the latest one, no warning", async () => {
      const b = bench();
      b.operate(0);
      b.operate(1);
      await b.releaseAll();
      // The stale stop found the engine at 1 and refused; the resume's recording recorded it.
      expect(b.started).toEqual([0, 1]);
      expect(b.stack()).toBe(1);
      expect(b.logs).toEqual(["a superseded recording did not finish; recording the latest state"]);
      expect(b.records.get("w")).toEqual({ key: "k", replicas: 1 });
    });

    it("refreshes a resume's recording when the stack may still hold the replaced workload", async () => {
      const records = new FastPathRecords(() => undefined);
      records.set("w", { key: "k", replicas: 1 });
      const seen: boolean[] = [];
      const hold = deferred();
      records.record(
        "w",
        { key: "k", replicas: 0 },
        () => hold.promise,
        () => undefined,
      );
      // Stop and resume recorded as one: the stack still holds the stopped workload.
      records.record(
        "w",
        { key: "k", replicas: 0 },
        async () => void seen.push(false),
        () => undefined,
      );
      records.record(
        "w",
        { key: "k", replicas: 1 },
        async ({ refresh }) => void seen.push(refresh),
        () => undefined,
      );
      hold.resolve();
      await records.settled("w");
      // The stop's recording ran first and the stack holds no workload: no refresh needed.
      expect(seen).toEqual([false]);
      const again = new FastPathRecords(() => undefined);
      again.set("w", { key: "k", replicas: 1 });
      again.record(
        "w",
        { key: "k", replicas: 1 },
        async ({ refresh }) => void seen.push(refresh),
        () => undefined,
      );
      await again.settled("w");
      expect(seen).toEqual([false, true]);
    });

    it("the latest recording failing leaves the workspace unknown (the next operation takes the full path)", async () => {
      const b = bench();
      b.operate(0, new Error("up failed"));
      await b.releaseAll();
      expect(b.records.get("w")).toBeUndefined();
      expect(b.logs).toEqual(["recording a fast-path change in the stack failed"]);
      expect(b.marks()).toBe(0);
    });

    it("forget (a full path, a removal) drops the pending recording and waits for the running one", async () => {
      const b = bench();
      b.operate(0);
      b.operate(1);
      b.records.forget("w");
      expect(b.records.get("w")).toBeUndefined();
      await b.releaseAll();
      expect(b.started).toEqual([0]);
      // What the running one recorded is not taken as known: the full path records its own.
      expect(b.records.recorded("w")).toBeUndefined();
      expect(b.marks()).toBe(0);
    });
  });
});
