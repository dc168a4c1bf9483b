import type * as k8s from "@pulumi/kubernetes";
import type { Unwrap } from "@pulumi/pulumi";

export type LabelSelector = Unwrap<k8s.types.input.meta.v1.LabelSelector>;

/**
 * Whether `selector` selects an object carrying `labels`, with the semantics of
 * apimachinery's `LabelSelectorAsSelector`: an empty selector selects everything, terms are
 * ANDed, and an unknown operator selects nothing. A missing selector selects nothing here
 * (NetworkPolicy requires `podSelector`), so a malformed policy never counts as isolating a pod.
 */
export function selects(selector: LabelSelector | undefined, labels: Record<string, string>): boolean {
  if (selector === undefined || selector === null) return false;
  const matchLabels = Object.entries(selector.matchLabels ?? {});
  if (!matchLabels.every(([key, value]) => labels[key] === value)) return false;
  return (selector.matchExpressions ?? []).every(({ key, operator, values = [] }) => {
    const present = Object.hasOwn(labels, key);
    const value = labels[key];
    switch (operator) {
      case "In":
        return present && value !== undefined && values.includes(value);
      case "NotIn":
        return !present || value === undefined || !values.includes(value);
      case "Exists":
        return present;
      case "DoesNotExist":
        return !present;
      default:
        return false;
    }
  });
}
