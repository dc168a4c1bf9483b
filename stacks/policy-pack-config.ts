/**
 * The policy pack's config on every `up`/`preview` of a session stack: the operator's file (when
 * given) with the session spec's `forbiddenEgressPorts` added to the ports
 * `egress-excludes-control-plane-ports` refuses, so the pack follows the server's real port
 * instead of a fixed list. One JSON file a stack under the data dir (0600), rewritten each time.
 */
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { ADAPTER_PORT } from "../contracts/adapter.ts";
import type { SessionSpec } from "../contracts/session-spec.ts";

/** Name of the pack's policy that takes the ports (policies/network-isolation-policies.ts). */
export const EGRESS_PORTS_POLICY = "egress-excludes-control-plane-ports";
/** The pack's policy that takes the session's ports (issue 40). */
export const SESSION_PORTS_POLICY = "session-ports-declared";

export type PolicyPackConfigInput = {
  /** The packs attached (stack options `policyPacks`). */
  packs: readonly string[];
  /** The operator's config files, positional to `packs` (may be shorter). */
  configs: readonly string[];
  /** Our pack's directory: the one that gets the ports. */
  ourPack: string;
  /** Where the generated files go. */
  dir: string;
  stackName: string;
  spec: PackSpec;
};

/** What of a session's spec the pack's config is made from. */
type PackSpec = Pick<SessionSpec, "forbiddenEgressPorts"> & Partial<Pick<SessionSpec, "ports" | "session">>;

/** One config file per pack, in pack order: ours generated, the others as the operator gave them. */
export function policyPackConfigsFor(input: PolicyPackConfigInput): string[] {
  const ours = input.packs.findIndex((p) => resolve(p) === resolve(input.ourPack));
  if (ours < 0) return [...input.configs];
  const config = ourPackConfig(input.configs[ours], input.spec);
  mkdirSync(input.dir, { recursive: true, mode: 0o700 });
  const file = join(input.dir, `${input.stackName}.json`);
  writeFileSync(file, `${JSON.stringify(config, null, 2)}\n`, { mode: 0o600 });
  // Configs are matched to packs by position: a pack before ours without one gets an empty one.
  const out: string[] = [];
  for (let i = 0; i < Math.max(ours + 1, input.configs.length); i++) {
    if (i === ours) out.push(file);
    else out.push(input.configs[i] ?? emptyConfig(input.dir));
  }
  return out;
}

/**
 * Our pack's config for a stack: the operator's file for it (when given) with the spec's forbidden
 * egress ports added. The object the generated file holds, and what the runner's in-process judge
 * (policies/judge.ts) is given.
 */
export function ourPackConfig(
  operatorFile: string | undefined,
  spec: PackSpec,
): Record<string, Record<string, unknown>> {
  const base = (operatorFile ? readJsonObject(operatorFile) : {}) as Record<string, Record<string, unknown>>;
  const policy = (base[EGRESS_PORTS_POLICY] ?? {}) as { forbiddenPorts?: unknown };
  const given = Array.isArray(policy.forbiddenPorts)
    ? policy.forbiddenPorts.filter((p): p is number => Number.isInteger(p))
    : [];
  const forbiddenPorts = [...new Set([...given, ...spec.forbiddenEgressPorts])].sort((a, b) => a - b);
  // The session's ports (issue 40): its own, never widened by an operator's file.
  const sessionPorts = {
    harnessPorts: [...new Set([ADAPTER_PORT, spec.session?.port ?? ADAPTER_PORT])],
    declaredPorts: (spec.ports ?? []).map((p) => p.port),
  };
  return {
    ...base,
    [EGRESS_PORTS_POLICY]: { ...policy, forbiddenPorts },
    [SESSION_PORTS_POLICY]: sessionPorts,
  };
}

function emptyConfig(dir: string): string {
  const file = join(dir, "empty.json");
  writeFileSync(file, "{}\n", { mode: 0o600 });
  return file;
}

function readJsonObject(path: string): Record<string, unknown> {
  const parsed: unknown = JSON.parse(readFileSync(path, "utf8"));
  if (!parsed || typeof parsed !== "object" || Array.isArray(parsed))
    throw new Error(`policy pack config ${path} is not a JSON object`);
  return parsed as Record<string, unknown>;
}
