import { describe, expect, it } from "vitest";
import { SessionSpec } from "../contracts/session-spec.ts";
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
});
