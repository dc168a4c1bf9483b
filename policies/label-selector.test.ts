import { describe, expect, it } from "vitest";
import { type LabelSelector, selects } from "./label-selector.ts";

const labels = { app: "agent", session: "demo" };

describe("label selectors", () => {
  it.each<[string, LabelSelector | undefined, boolean]>([
    ["an empty selector selects everything", {}, true],
    ["a missing selector selects nothing", undefined, false],
    ["matching matchLabels select", { matchLabels: { app: "agent" } }, true],
    ["one differing matchLabel does not", { matchLabels: { app: "agent", session: "other" } }, false],
    [
      "In selects a listed value",
      { matchExpressions: [{ key: "session", operator: "In", values: ["demo"] }] },
      true,
    ],
    [
      "In does not select a missing key",
      { matchExpressions: [{ key: "tier", operator: "In", values: ["x"] }] },
      false,
    ],
    [
      "NotIn selects a missing key",
      { matchExpressions: [{ key: "tier", operator: "NotIn", values: ["x"] }] },
      true,
    ],
    [
      "NotIn rejects a listed value",
      { matchExpressions: [{ key: "app", operator: "NotIn", values: ["agent"] }] },
      false,
    ],
    ["Exists selects a present key", { matchExpressions: [{ key: "app", operator: "Exists" }] }, true],
    [
      "DoesNotExist rejects a present key",
      { matchExpressions: [{ key: "app", operator: "DoesNotExist" }] },
      false,
    ],
    ["an unknown operator selects nothing", { matchExpressions: [{ key: "app", operator: "Like" }] }, false],
    [
      "labels and expressions are ANDed",
      {
        matchLabels: { app: "agent" },
        matchExpressions: [{ key: "session", operator: "In", values: ["x"] }],
      },
      false,
    ],
  ])("%s", (_, selector, expected) => {
    expect(selects(selector, labels)).toBe(expected);
  });
});
