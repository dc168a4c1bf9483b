import { describe, expect, it } from "vitest";
import { policies } from "./policy-list.ts";
import { dockerContainer, dockerNetwork, dockerSession, dockerVolume } from "./testing/docker-fixtures.ts";
import {
  deployment,
  kubernetesSession,
  networkPolicy,
  persistentVolumeClaim,
  pod,
  secret,
  service,
} from "./testing/kubernetes-fixtures.ts";
import { type FakeResource, judgedBy, violatedBy, violatedByStack } from "./testing/policy-harness.ts";

describe("the agent-sessions policy list", () => {
  it("names every security invariant once, in stable kebab-case", () => {
    const names = policies.map((p) => p.name);
    expect(new Set(names).size).toBe(names.length);
    for (const name of names) expect(name).toMatch(/^[a-z0-9]+(-[a-z0-9]+)*$/);
    expect(names).toEqual([
      "image-pinned-by-digest",
      "image-from-approved-registry",
      "no-service-account-token",
      "no-host-namespaces",
      "no-privileged-containers",
      "no-privilege-escalation",
      "capabilities-dropped",
      "run-as-non-root",
      "read-only-root-filesystem",
      "seccomp-runtime-default",
      "narrowed-mounts",
      "no-literal-credentials-in-env",
      "resource-limits-set",
      "service-cluster-ip-only",
      "egress-excludes-control-plane-ports",
      "ingress-from-scoped-peers",
      "session-ports-declared",
      "docker-internal-network",
      "network-policy-selects-every-session-pod",
      "docker-container-on-stack-network",
      "mounts-only-stack-volumes",
    ]);
  });

  it("leaves enforcement to the pack (mandatory) and describes every policy", () => {
    for (const policy of policies) {
      expect(policy.enforcementLevel).toBeUndefined();
      expect(policy.description.length).toBeGreaterThan(20);
    }
  });
});

describe("the compliant baseline", () => {
  const baselines: [string, () => FakeResource][] = [
    ["Deployment", () => deployment()],
    ["Pod", () => pod()],
    ["PersistentVolumeClaim", () => persistentVolumeClaim()],
    ["Service", () => service()],
    ["Secret", () => secret()],
    ["NetworkPolicy", () => networkPolicy()],
    ["docker Container", () => dockerContainer()],
    ["docker Network", () => dockerNetwork()],
    ["docker Volume", () => dockerVolume()],
  ];

  it.each(baselines)("a compliant %s passes every resource policy", async (_, build) => {
    expect(await violatedBy(build())).toEqual([]);
  });

  // Guards against a vacuous baseline: a kind no policy recognises would pass everything.
  it.each([
    ["Deployment", () => deployment(), 13],
    ["Pod", () => pod(), 13],
    ["PersistentVolumeClaim", () => persistentVolumeClaim(), 1],
    ["Service", () => service(), 2],
    ["Secret", () => secret(), 1],
    ["NetworkPolicy", () => networkPolicy(), 3],
    ["docker Container", () => dockerContainer(), 12],
    ["docker Network", () => dockerNetwork(), 2],
  ] as const)("a %s is judged by the policies that apply to it", async (_, build, count) => {
    expect(await judgedBy(build())).toHaveLength(count);
  });

  it("a compliant Kubernetes session stack passes every policy", async () => {
    expect(await violatedByStack(kubernetesSession())).toEqual([]);
  });

  it("a compliant Docker session stack passes every policy", async () => {
    expect(await violatedByStack(dockerSession())).toEqual([]);
  });

  it("a resource of a kind the pack does not judge passes every policy", async () => {
    const configMap = {
      type: "kubernetes:core/v1:ConfigMap",
      name: "demo",
      props: { data: { API_KEY: "x" } },
    };
    expect(await violatedBy(configMap)).toEqual([]);
  });
});
