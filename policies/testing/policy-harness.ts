import {
  type PolicyResource,
  type ResourceValidationArgs,
  type ResourceValidationPolicy,
  type StackValidationArgs,
  type StackValidationPolicy,
  unknownCheckingProxy,
} from "@pulumi/policy";
import { policies } from "../policy-list.ts";

/**
 * Runs the pack's policies the way its Analyzer server does (@pulumi/policy server.js: props
 * behind the unknown-checking proxy, `isType` by type token, config per policy), without gRPC
 * or the CLI, and collects what they report.
 */

/** A resource as the engine describes it to a policy: type token, name, props. */
export interface FakeResource {
  type: string;
  name: string;
  props: object;
}

/** Config by policy name, as in a `--policy-pack-config` file (defaults apply when absent). */
export type FakeConfig = Record<string, Record<string, unknown>>;

export interface Violation {
  policy: string;
  message: string;
  urn?: string;
}

class NotApplicable extends Error {}

const resourcePolicies = policies.filter((p): p is ResourceValidationPolicy => "validateResource" in p);
const stackPolicies = policies.filter((p): p is StackValidationPolicy => "validateStack" in p);

/** Every violation the resource policies report for `resource`. */
export async function resourceViolations(
  resource: FakeResource,
  config: FakeConfig = {},
): Promise<Violation[]> {
  return (await judge(resource, config)).violations;
}

/** Names of the resource policies that judge `resource` (do not call it not applicable). */
export async function judgedBy(resource: FakeResource): Promise<string[]> {
  return (await judge(resource, {})).judgedBy;
}

async function judge(
  resource: FakeResource,
  config: FakeConfig,
): Promise<{ violations: Violation[]; judgedBy: string[] }> {
  const violations: Violation[] = [];
  const judgedBy: string[] = [];
  for (const policy of resourcePolicies) {
    const validation = policy.validateResource;
    const validations = validation === undefined ? [] : Array.isArray(validation) ? validation : [validation];
    for (const validate of validations) {
      const report = (message: string) => violations.push({ policy: policy.name, message });
      const applied = await applicable(() =>
        validate(resourceArgs(resource, config[policy.name] ?? {}), report),
      );
      if (applied) judgedBy.push(policy.name);
    }
  }
  return { violations, judgedBy };
}

/** Every violation the stack policies report for a stack made of `resources`. */
export async function stackViolations(
  resources: FakeResource[],
  config: FakeConfig = {},
): Promise<Violation[]> {
  const violations: Violation[] = [];
  for (const policy of stackPolicies) {
    const args: StackValidationArgs = {
      resources: resources.map(policyResource),
      stackTags: new Map(),
      getConfig: <T extends object>() => (config[policy.name] ?? {}) as T,
      notApplicable,
    };
    const report = (message: string, urn?: string) => violations.push({ policy: policy.name, message, urn });
    await applicable(() => policy.validateStack(args, report));
  }
  return violations;
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

export function urnOf(resource: FakeResource): string {
  return `urn:pulumi:test::agent-sessions::${resource.type}::${resource.name}`;
}

function resourceArgs(resource: FakeResource, config: Record<string, unknown>): ResourceValidationArgs {
  const props = unknownCheckingProxy(structuredClone(resource.props)) as Record<string, unknown>;
  return {
    type: resource.type,
    props,
    urn: urnOf(resource),
    name: resource.name,
    opts: { protect: false, ignoreChanges: [], aliases: [], customTimeouts, additionalSecretOutputs: [] },
    stackTags: new Map(),
    isType: (resourceClass) => pulumiTypeOf(resourceClass) === resource.type,
    asType: (resourceClass) => (pulumiTypeOf(resourceClass) === resource.type ? (props as never) : undefined),
    getConfig: <T extends object>() => config as T,
    notApplicable,
  };
}

function policyResource(resource: FakeResource): PolicyResource {
  const props = unknownCheckingProxy(structuredClone(resource.props)) as Record<string, unknown>;
  return {
    type: resource.type,
    props,
    urn: urnOf(resource),
    name: resource.name,
    opts: { protect: false, ignoreChanges: [], aliases: [], customTimeouts, additionalSecretOutputs: [] },
    dependencies: [],
    propertyDependencies: {},
    isType: (resourceClass) => pulumiTypeOf(resourceClass) === resource.type,
    asType: (resourceClass) => (pulumiTypeOf(resourceClass) === resource.type ? (props as never) : undefined),
  };
}

const customTimeouts = { createSeconds: 0, updateSeconds: 0, deleteSeconds: 0 };

/** The type token SDK-generated resource classes carry (what the server's isTypeOf compares). */
function pulumiTypeOf(resourceClass: object): unknown {
  return (resourceClass as { __pulumiType?: unknown }).__pulumiType;
}

function notApplicable(reason?: string): never {
  throw new NotApplicable(reason);
}

/** Runs one validation; false when it declared itself not applicable. */
async function applicable(run: () => Promise<void> | void): Promise<boolean> {
  try {
    await run();
    return true;
  } catch (error) {
    if (error instanceof NotApplicable) return false;
    throw error;
  }
}
