import { describe, expect, it } from "vitest";
import { HarnessSessionSpec } from "./harness-session.ts";
import { expiryOf, expiryViolations } from "./session-expiry.ts";

const created = "2026-01-01T00:00:00.000Z";
const now = new Date("2026-01-01T00:10:00.000Z");
const spec = (over: object) => HarnessSessionSpec.parse({ agentRef: "a", ...over });

describe("session expiry", () => {
  it("ends ttl after the creation, or at expiresAt in UTC", () => {
    expect(expiryOf(spec({ ttl: "1h30m" }), created)).toBe("2026-01-01T01:30:00.000Z");
    expect(expiryOf(spec({ expiresAt: "2026-01-01T02:00:00+02:00" }), created)).toBe(
      "2026-01-01T00:00:00.000Z",
    );
    expect(expiryOf(spec({}), created)).toBeUndefined();
  });

  it.each(["0", "-1m", "soon", "1.5h", "8785h", ""])("refuses ttl %j in the schema", (ttl) => {
    expect(HarnessSessionSpec.safeParse({ agentRef: "a", ttl }).success).toBe(false);
  });

  it.each(["tomorrow", "2026-01-01", "2026-01-01T00:00:00"])(
    "refuses expiresAt %j (no zone, not a time)",
    (at) => {
      expect(HarnessSessionSpec.safeParse({ agentRef: "a", expiresAt: at }).success).toBe(false);
    },
  );

  it("says what is wrong beyond the schema, naming the field", () => {
    expect(expiryViolations(spec({ ttl: "1h", expiresAt: "2026-01-02T00:00:00Z" }), created, now)).toEqual([
      { field: "spec.expiresAt", description: "set one of spec.ttl and spec.expiresAt, not both" },
    ]);
    const pastTtl = expiryViolations(spec({ ttl: "5m" }), created, now);
    expect(pastTtl).toHaveLength(1);
    expect(pastTtl[0]?.field).toBe("spec.ttl");
    expect(pastTtl[0]?.description).toMatch(/already past/);
    const pastAt = expiryViolations(spec({ expiresAt: "2026-01-01T00:09:59Z" }), created, now);
    expect(pastAt[0]?.field).toBe("spec.expiresAt");
    expect(pastAt[0]?.description).toMatch(/already past/);
    const far = expiryViolations(spec({ expiresAt: "2027-06-01T00:00:00Z" }), created, now);
    expect(far[0]?.description).toMatch(/at most 366 days ahead/);
  });

  it("accepts an end in the future, and no expiry at all", () => {
    expect(expiryViolations(spec({ ttl: "11m" }), created, now)).toEqual([]);
    expect(expiryViolations(spec({ expiresAt: "2026-12-31T00:00:00Z" }), created, now)).toEqual([]);
    expect(expiryViolations(spec({}), created, now)).toEqual([]);
  });
});
