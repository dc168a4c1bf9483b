import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { DnsLabel, sessionStackName, workloadName } from "./session-spec.ts";

const label = fc
  .array(fc.constantFrom(..."abcxyz019-"), { minLength: 1, maxLength: 63 })
  .map((chars) => chars.join(""))
  .filter((s) => DnsLabel.safeParse(s).success);

describe("session names", () => {
  it("do not alias across namespaces: (team, x-foo) and (team-x, foo) are two workloads", () => {
    expect(workloadName("team", "x-foo")).toBe("as-team-x-foo");
    expect(workloadName("team-x", "foo")).toBe("as-team-x--foo");
  });

  it("DnsLabel refuses '--', so stack names are reversible", () => {
    expect(DnsLabel.safeParse("a--b").error?.issues[0]?.message).toMatch(/must not contain '--'/);
    expect(() => sessionStackName("a--b", "c")).toThrow();
    expect(sessionStackName("a", "b-c")).toBe("a--b-c");
  });

  it("hash names over 63 characters with 64 bits, apart from every unhashed name", () => {
    const long = workloadName("team", "x".repeat(63));
    expect(long).toMatch(/^as--team-x+-[0-9a-f]{16}$/);
    expect(long.length).toBeLessThanOrEqual(63);
    // Someone who computes that name cannot take it: unhashed names never start with `as--`.
    const rest = long.slice("as--team-".length);
    expect(workloadName("team", rest)).not.toBe(long);
    expect(workloadName("team", `${"x".repeat(62)}y`)).not.toBe(long);
  });

  it("are one session's only, and DNS labels (property)", () => {
    fc.assert(
      fc.property(label, label, label, label, (ns1, n1, ns2, n2) => {
        const a = workloadName(ns1, n1);
        expect(a.length).toBeLessThanOrEqual(63);
        expect(/^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/.test(a)).toBe(true);
        if (ns1 !== ns2 || n1 !== n2) {
          expect(a).not.toBe(workloadName(ns2, n2));
          expect(sessionStackName(ns1, n1)).not.toBe(sessionStackName(ns2, n2));
        }
      }),
      { numRuns: 2000 },
    );
  });

  it("are one session's only even for crafted pairs that share every dash-split", () => {
    const pairs: [string, string][] = [];
    for (const ns of ["a", "a-b", "a-b-c"]) for (const n of ["b-c", "c", "b-c-d", "c-d"]) pairs.push([ns, n]);
    const names = pairs.map(([ns, n]) => workloadName(ns, n));
    expect(new Set(names).size).toBe(names.length);
  });
});
