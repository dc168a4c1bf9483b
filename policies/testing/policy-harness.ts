import {
  type JudgedInput,
  judgeResource,
  judgeStack,
  type PackConfig,
  urnOf,
  type Violation,
} from "../judge.ts";

/**
 * The pack's unit tests judge their fixtures with the pack's own in-process judge (../judge.ts,
 * the one the runner's fast create uses), through these names.
 */

/** A resource as the engine describes it to a policy: type token, name, props. */
export type FakeResource = JudgedInput;
/** Config by policy name, as in a `--policy-pack-config` file (defaults apply when absent). */
export type FakeConfig = PackConfig;
export type { Violation };
export { urnOf };

/** Every violation the resource policies report for `resource`. */
export async function resourceViolations(
  resource: FakeResource,
  config: FakeConfig = {},
): Promise<Violation[]> {
  return (await judgeResource(resource, config)).violations;
}

/** Names of the resource policies that judge `resource` (do not call it not applicable). */
export async function judgedBy(resource: FakeResource): Promise<string[]> {
  return (await judgeResource(resource, {})).judgedBy;
}

/** Every violation the stack policies report for a stack made of `resources`. */
export function stackViolations(resources: FakeResource[], config: FakeConfig = {}): Promise<Violation[]> {
  return judgeStack(resources, config);
}

/** The names of the policies `violations` came from, each once, sorted. */
export function policyNames(violations: readonly Violation[]): string[] {
  return [...new Set(violations.map((v) => v.policy))].sort();
}

/** Names of the resource policies `resource` violates. */
export async function violatedBy(resource: FakeResource, config: FakeConfig = {}): Promise<string[]> {
  return policyNames(await resourceViolations(resource, config));
}

/** Names of the policies a stack of `resources` violates: every resource's, then the stack's. */
export async function violatedByStack(resources: FakeResource[], config: FakeConfig = {}): Promise<string[]> {
  const perResource = await Promise.all(resources.map((r) => resourceViolations(r, config)));
  return policyNames([...perResource.flat(), ...(await stackViolations(resources, config))]);
}
