import {
  type PolicyResource,
  type ResourceValidationArgs,
  type ResourceValidationPolicy,
  type StackValidationArgs,
  type StackValidationPolicy,
  unknownCheckingProxy,
} from "@pulumi/policy";
import { policies } from "./policy-list.ts";

/**
 * Runs the pack's policies the way its Analyzer server does (@pulumi/policy server.js: props
 * behind the unknown-checking proxy, `isType` by type token, config per policy), in process,
 * without gRPC or the CLI, and collects what they report. The runner's fast create judges the
 * resources it is about to make with it before it touches the engine (runner/docker/fast-create.ts, runner/kubernetes/fast-create.ts);
 * the pack's unit tests judge their fixtures with it (testing/policy-harness.ts).
 */

/** A resource as the engine describes it to a policy: type token, name, props. */
export interface JudgedInput {
  type: string;
  name: string;
  props: object;
}

/** Config by policy name, as in a `--policy-pack-config` file (defaults apply when absent). */
export type PackConfig = Record<string, Record<string, unknown>>;

export interface Violation {
  policy: string;
  message: string;
  urn?: string;
}

class NotApplicable extends Error {}

const resourcePolicies = policies.filter((p): p is ResourceValidationPolicy => "validateResource" in p);
const stackPolicies = policies.filter((p): p is StackValidationPolicy => "validateStack" in p);

/** Every violation the resource policies report for `resource`, and which policies judged it. */
export async function judgeResource(
  resource: JudgedInput,
  config: PackConfig = {},
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
export async function judgeStack(resources: JudgedInput[], config: PackConfig = {}): Promise<Violation[]> {
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

/** Everything the pack reports for a stack of `resources`: every resource's violations, then the stack's. */
export async function judgeAll(resources: JudgedInput[], config: PackConfig = {}): Promise<Violation[]> {
  const perResource = await Promise.all(resources.map((r) => judgeResource(r, config)));
  return [...perResource.flatMap((r) => r.violations), ...(await judgeStack(resources, config))];
}

export function urnOf(resource: JudgedInput): string {
  return `urn:pulumi:test::agent-sessions::${resource.type}::${resource.name}`;
}

/** What a resource under validation and a resource of the stack both carry. */
function described(resource: JudgedInput) {
  const props = unknownCheckingProxy(structuredClone(resource.props)) as Record<string, unknown>;
  return {
    type: resource.type,
    props,
    urn: urnOf(resource),
    name: resource.name,
    opts: { protect: false, ignoreChanges: [], aliases: [], customTimeouts, additionalSecretOutputs: [] },
    isType: (resourceClass: object) => pulumiTypeOf(resourceClass) === resource.type,
    asType: (resourceClass: object) =>
      pulumiTypeOf(resourceClass) === resource.type ? (props as never) : undefined,
  };
}

function resourceArgs(resource: JudgedInput, config: Record<string, unknown>): ResourceValidationArgs {
  return {
    ...described(resource),
    stackTags: new Map(),
    getConfig: <T extends object>() => config as T,
    notApplicable,
  };
}

function policyResource(resource: JudgedInput): PolicyResource {
  return { ...described(resource), dependencies: [], propertyDependencies: {} };
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
