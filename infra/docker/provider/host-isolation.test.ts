import { describe, expect, it } from "vitest";
import { assertBridgeName, GUARD_CHAIN, isRuleOf, removeBridgeRules } from "./host-isolation.ts";

describe("host isolation rules are found by their exact bridge", () => {
  it("refuses an empty bridge name instead of matching every session's rules", async () => {
    await expect(removeBridgeRules("")).rejects.toThrow(/"" is not a bridge interface name/);
    expect(() => assertBridgeName("br-0123456789ab")).not.toThrow();
    expect(() => assertBridgeName("br-0123456789abc")).toThrow();
    expect(() => assertBridgeName("a b")).toThrow();
  });

  it("matches its own rules only, not another bridge whose name it prefixes", () => {
    const rule = (bridge: string) =>
      `-A ${GUARD_CHAIN} -i ${bridge} -j DROP -m comment --comment "agent-sessions:${bridge}"`;
    expect(isRuleOf(rule("br-abc"), GUARD_CHAIN, "br-abc")).toBe(true);
    expect(isRuleOf(rule("br-abcdef"), GUARD_CHAIN, "br-abc")).toBe(false);
    expect(isRuleOf(rule("br-abc"), "OTHER", "br-abc")).toBe(false);
    expect(isRuleOf(`-A ${GUARD_CHAIN} -j DROP --comment agent-sessions:br-abc`, GUARD_CHAIN, "br-abc")).toBe(
      true,
    );
  });
});
