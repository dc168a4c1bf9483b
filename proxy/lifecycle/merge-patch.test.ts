import { describe, expect, it } from "vitest";
import { mergePatch } from "./merge-patch.ts";

describe("JSON merge patch (RFC 7386)", () => {
  // The examples of RFC 7386 Appendix A.
  it.each([
    [{ a: "b" }, { a: "c" }, { a: "c" }],
    [{ a: "b" }, { b: "c" }, { a: "b", b: "c" }],
    [{ a: "b" }, { a: null }, {}],
    [{ a: "b", b: "c" }, { a: null }, { b: "c" }],
    [{ a: ["b"] }, { a: "c" }, { a: "c" }],
    [{ a: "c" }, { a: ["b"] }, { a: ["b"] }],
    [{ a: { b: "c" } }, { a: { b: "d", c: null } }, { a: { b: "d" } }],
    [{ a: [{ b: "c" }] }, { a: [1] }, { a: [1] }],
    [
      ["a", "b"],
      ["c", "d"],
      ["c", "d"],
    ],
    [{ a: "b" }, ["c"], ["c"]],
    [{ a: "foo" }, null, null],
    [{ a: "foo" }, "bar", "bar"],
    [{ e: null }, { a: 1 }, { e: null, a: 1 }],
    [[1, 2], { a: "b", c: null }, { a: "b" }],
    [{}, { a: { bb: { ccc: null } } }, { a: { bb: {} } }],
  ])("patches %j with %j into %j", (target, patch, result) => {
    expect(mergePatch(target, patch)).toEqual(result);
  });

  it("never mutates the target", () => {
    const target = { spec: { desiredState: "running", idleTimeout: "15m" } };
    const patched = mergePatch(target, { spec: { desiredState: "stopped" } });
    expect(patched).toEqual({ spec: { desiredState: "stopped", idleTimeout: "15m" } });
    expect(target.spec.desiredState).toBe("running");
  });
});
