import { describe, expect, it } from "vitest";
import { dockerContainer, dockerNetwork, dockerVolume } from "./testing/docker-fixtures.ts";
import {
  deployment,
  NAMESPACE,
  networkPolicy,
  persistentVolumeClaim,
  pod,
  secret,
  service,
} from "./testing/kubernetes-fixtures.ts";
import { type FakeResource, stackViolations, urnOf, violatedByStack } from "./testing/policy-harness.ts";

/** A Kubernetes session stack with some of its resources replaced. */
function kubernetesStack(replace: { [kind: string]: FakeResource | null } = {}): FakeResource[] {
  const parts = {
    pvc: persistentVolumeClaim(),
    secret: secret(),
    deployment: deployment(),
    service: service(),
  };
  const all: Record<string, FakeResource | null> = { ...parts, networkPolicy: networkPolicy(), ...replace };
  return Object.values(all).filter((r): r is FakeResource => r !== null);
}

describe("network-policy-selects-every-session-pod", () => {
  it("a Deployment without a NetworkPolicy violates it, naming the Deployment", async () => {
    const stack = kubernetesStack({ networkPolicy: null });
    const violations = await stackViolations(stack);
    expect(violations).toEqual([
      {
        policy: "network-policy-selects-every-session-pod",
        message: `no NetworkPolicy in namespace ${NAMESPACE} selects the pods of demo {"agent-sessions.dev/session":"demo"}`,
        urn: urnOf(deployment()),
      },
    ]);
  });

  it("a bare Pod is held to it like a Deployment", async () => {
    expect(await violatedByStack([persistentVolumeClaim(), pod(), networkPolicy()])).toEqual([]);
    const unselected = networkPolicy((p) => {
      p.spec!.podSelector = { matchLabels: { other: "pod" } };
    });
    expect(await violatedByStack([persistentVolumeClaim(), pod(), unselected])).toEqual([
      "network-policy-selects-every-session-pod",
    ]);
  });

  it("a NetworkPolicy in another namespace violates it", async () => {
    const elsewhere = networkPolicy((p) => {
      p.metadata!.namespace = "other";
    });
    expect(await violatedByStack(kubernetesStack({ networkPolicy: elsewhere }))).toEqual([
      "network-policy-selects-every-session-pod",
    ]);
  });

  it("a podSelector that misses the session's labels violates it", async () => {
    const misses = networkPolicy((p) => {
      p.spec!.podSelector = { matchLabels: { "agent-sessions.dev/session": "another" } };
    });
    expect(await violatedByStack(kubernetesStack({ networkPolicy: misses }))).toEqual([
      "network-policy-selects-every-session-pod",
    ]);
  });

  it.each([
    ["Ingress only", ["Ingress"]],
    ["Egress only", ["Egress"]],
    ["unset", undefined],
  ])("a selecting policy with policyTypes %s violates it", async (_, policyTypes) => {
    const oneWay = networkPolicy((p) => {
      p.spec!.policyTypes = policyTypes;
    });
    expect(await violatedByStack(kubernetesStack({ networkPolicy: oneWay }))).toEqual([
      "network-policy-selects-every-session-pod",
    ]);
  });

  it.each([
    ["an empty podSelector (every pod of the namespace)", {}],
    [
      "a matchExpressions selector",
      { matchExpressions: [{ key: "agent-sessions.dev/session", operator: "In", values: ["demo", "x"] }] },
    ],
  ])("%s selects the session's pods", async (_, podSelector) => {
    const selecting = networkPolicy((p) => {
      p.spec!.podSelector = podSelector;
    });
    expect(await violatedByStack(kubernetesStack({ networkPolicy: selecting }))).toEqual([]);
  });
});

describe("mounts-only-stack-volumes", () => {
  it("mounting a claim the stack does not declare violates it", async () => {
    const borrowing = deployment((spec) => {
      spec.volumes![0]!.persistentVolumeClaim!.claimName = "another-session-workspace";
    });
    expect(await violatedByStack(kubernetesStack({ deployment: borrowing }))).toEqual([
      "mounts-only-stack-volumes",
    ]);
  });

  it("a claim of the same name in another namespace violates it", async () => {
    const elsewhere = persistentVolumeClaim((c) => {
      c.metadata!.namespace = "other";
    });
    expect(await violatedByStack(kubernetesStack({ pvc: elsewhere }))).toEqual(["mounts-only-stack-volumes"]);
  });

  it("a Docker container mounting another stack's volume violates it", async () => {
    const borrowing = dockerContainer((c) => {
      c.mounts[0]!.source = "agent-sessions-other-workspace";
    });
    expect(await violatedByStack([dockerVolume(), dockerNetwork(), borrowing])).toEqual([
      "mounts-only-stack-volumes",
    ]);
  });
});

describe("mounts-only-stack-volumes and skills (issue 39)", () => {
  it("the container's own skills volume, read-only at /skills, is no stack Volume and violates nothing", async () => {
    const withSkills = dockerContainer((c) => {
      c.mounts.push({
        type: "volume",
        source: "agent-sessions-demo-skills",
        target: "/skills",
        readOnly: true,
      });
    });
    expect(await violatedByStack([dockerVolume(), dockerNetwork(), withSkills])).toEqual([]);
  });

  it("another container's skills volume violates it", async () => {
    const borrowing = dockerContainer((c) => {
      c.mounts.push({
        type: "volume",
        source: "agent-sessions-other-skills",
        target: "/skills",
        readOnly: true,
      });
    });
    expect(await violatedByStack([dockerVolume(), dockerNetwork(), borrowing])).toContain(
      "mounts-only-stack-volumes",
    );
  });
});

describe("docker-container-on-stack-network", () => {
  it.each([
    ["the default bridge", "bridge"],
    ["another stack's network", "agent-sessions-other"],
    ["no network mode", ""],
  ])("a container on %s violates it", async (_, networkMode) => {
    const stray = dockerContainer((c) => {
      c.networkMode = networkMode;
    });
    expect(await violatedByStack([dockerVolume(), dockerNetwork(), stray])).toEqual([
      "docker-container-on-stack-network",
    ]);
  });

  it("a container whose network the stack lacks violates it", async () => {
    expect(await violatedByStack([dockerVolume(), dockerContainer()])).toEqual([
      "docker-container-on-stack-network",
    ]);
  });
});
