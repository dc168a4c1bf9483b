import type { PolicyConfigSchema, ResourceValidationArgs } from "@pulumi/policy";
import { z } from "zod";

/**
 * The pack's configurable values. Each schema is published to the engine (`configSchema`), which
 * fills in the defaults and validates a `--policy-pack-config` file against it; the policies
 * parse the value again with zod so a missing or malformed config can never widen a policy.
 */

/** @default ["127.0.0.1:5000"] — the project's local registry (scripts/testbed.d/docker.sh). */
export const DEFAULT_APPROVED_REGISTRIES: readonly string[] = ["127.0.0.1:5000"];

/**
 * NATS 4222, kube-apiserver 6443, etcd 2379/2380, kubelet 10250, the agent-sessions server 8787.
 * @default [4222, 6443, 2379, 2380, 10250, 8787]
 */
export const DEFAULT_FORBIDDEN_EGRESS_PORTS: readonly number[] = [4222, 6443, 2379, 2380, 10250, 8787];

export const approvedRegistriesSchema: PolicyConfigSchema = {
  properties: {
    approvedRegistries: {
      type: "array",
      items: { type: "string", minLength: 1 },
      minItems: 1,
      default: [...DEFAULT_APPROVED_REGISTRIES],
      description: "Registry hosts (host[:port], as in the image reference) images may come from.",
    },
  },
};

export const forbiddenEgressPortsSchema: PolicyConfigSchema = {
  properties: {
    forbiddenPorts: {
      type: "array",
      items: { type: "integer", minimum: 1, maximum: 65535 },
      default: [...DEFAULT_FORBIDDEN_EGRESS_PORTS],
      description: "Control-plane ports no session egress rule may allow.",
    },
  },
};

/**
 * The ports a session's Service and NetworkPolicy may open (issue 40): the harness's own
 * (`harnessPorts`, the adapter's 8080 and a runtime's `spec.session.port`) and the session's
 * declared `spec.ports` (`declaredPorts`). The runner fills both in on every `up`.
 * @default harnessPorts [8080], declaredPorts []
 */
export const sessionPortsSchema: PolicyConfigSchema = {
  properties: {
    harnessPorts: {
      type: "array",
      items: { type: "integer", minimum: 1, maximum: 65535 },
      default: [8080],
      description: "The harness's own ports (the adapter's, a runtime's session port).",
    },
    declaredPorts: {
      type: "array",
      items: { type: "integer", minimum: 1, maximum: 65535 },
      default: [],
      description: "The session's declared ports (HarnessSession spec.ports).",
    },
  },
};

const SessionPortsConfig = z.object({
  harnessPorts: z.array(z.int().min(1).max(65535)).default(() => [8080]),
  declaredPorts: z.array(z.int().min(1).max(65535)).default(() => []),
});

/** Every port a session's Service and NetworkPolicy ingress may name. */
export function sessionPortsOf(args: ConfigSource): number[] {
  const config = SessionPortsConfig.parse(args.getConfig());
  return [...config.harnessPorts, ...config.declaredPorts];
}

const ApprovedRegistries = z.object({
  approvedRegistries: z
    .array(z.string().min(1))
    .min(1)
    .default(() => [...DEFAULT_APPROVED_REGISTRIES]),
});

const ForbiddenEgressPorts = z.object({
  forbiddenPorts: z.array(z.int().min(1).max(65535)).default(() => [...DEFAULT_FORBIDDEN_EGRESS_PORTS]),
});

type ConfigSource = Pick<ResourceValidationArgs, "getConfig">;

/** Approved registry hosts, lower-cased (hosts compare case-insensitively). */
export function approvedRegistriesOf(args: ConfigSource): string[] {
  return ApprovedRegistries.parse(args.getConfig()).approvedRegistries.map((r) => r.toLowerCase());
}

export function forbiddenEgressPortsOf(args: ConfigSource): number[] {
  return ForbiddenEgressPorts.parse(args.getConfig()).forbiddenPorts;
}
