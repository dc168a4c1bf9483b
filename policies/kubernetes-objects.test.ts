import { describe, expect, it } from "vitest";
import { networkPolicy, persistentVolumeClaim, secret, service } from "./testing/kubernetes-fixtures.ts";
import { resourceViolations, violatedBy } from "./testing/policy-harness.ts";

describe("a PersistentVolumeClaim", () => {
  it.each([
    ["binds a named volume (volumeName)", { volumeName: "pv-host-data" }],
    ["selects existing volumes (selector)", { selector: { matchLabels: { tier: "shared" } } }],
    [
      "clones another claim (dataSource)",
      { dataSource: { kind: "PersistentVolumeClaim", name: "other-session" } },
    ],
    [
      "populates from another object (dataSourceRef)",
      { dataSourceRef: { kind: "PersistentVolumeClaim", name: "other-session" } },
    ],
  ])("that %s violates narrowed-mounts", async (_, field) => {
    const violated = await violatedBy(
      persistentVolumeClaim((claim) => {
        Object.assign(claim.spec!, field);
      }),
    );
    expect(violated).toEqual(["narrowed-mounts"]);
  });
});

describe("a Service", () => {
  it.each(["NodePort", "LoadBalancer", "ExternalName"])(
    "of type %s violates service-cluster-ip-only",
    async (type) => {
      const violated = await violatedBy(
        service((s) => {
          s.spec!.type = type;
        }),
      );
      expect(violated).toEqual(["service-cluster-ip-only"]);
    },
  );

  it("with externalIPs violates service-cluster-ip-only", async () => {
    const violated = await violatedBy(
      service((s) => {
        s.spec!.externalIPs = ["203.0.113.7"];
      }),
    );
    expect(violated).toEqual(["service-cluster-ip-only"]);
  });

  it("with no type (ClusterIP by default) passes", async () => {
    expect(
      await violatedBy(
        service((s) => {
          delete s.spec!.type;
        }),
      ),
    ).toEqual([]);
  });
});

describe("a Secret", () => {
  it("of type kubernetes.io/service-account-token violates no-service-account-token", async () => {
    const violated = await violatedBy(
      secret((s) => {
        s.type = "kubernetes.io/service-account-token";
        s.metadata!.annotations = { "kubernetes.io/service-account.name": "default" };
      }),
    );
    expect(violated).toEqual(["no-service-account-token"]);
  });
});

describe("a NetworkPolicy's ingress", () => {
  it("a runner in another namespace, by namespaceSelector and podSelector in one peer, passes", async () => {
    const violated = await violatedBy(
      networkPolicy((policy) => {
        policy.spec!.ingress![0]!.from = [
          {
            namespaceSelector: { matchLabels: { "agent-sessions.dev/component": "control-plane" } },
            podSelector: { matchLabels: { "agent-sessions.dev/component": "runner" } },
          },
          { ipBlock: { cidr: "10.213.0.1/32" } },
        ];
      }),
    );
    expect(violated).toEqual([]);
  });

  it.each([
    ["no from (every source)", undefined, 'ingress rule 0 admits every source (no "from" peers)'],
    [
      "a namespaceSelector alone",
      [{ namespaceSelector: { matchLabels: { "agent-sessions.dev/component": "control-plane" } } }],
      "ingress rule 0 peer 0 admits every pod of the namespaces its namespaceSelector picks",
    ],
    [
      "an empty podSelector",
      [{ podSelector: {} }],
      "ingress rule 0 peer 0 admits every pod of the namespace (empty podSelector)",
    ],
    [
      "every namespace's pods with an empty podSelector",
      [{ namespaceSelector: {}, podSelector: {} }],
      "ingress rule 0 peer 0 admits every pod of the namespaces its namespaceSelector picks",
    ],
    [
      "ipBlock 0.0.0.0/0",
      [{ ipBlock: { cidr: "0.0.0.0/0" } }],
      "ingress rule 0 peer 0 admits ipBlock 0.0.0.0/0, wider than /8",
    ],
  ])("a rule with %s violates ingress-from-scoped-peers", async (_, from, message) => {
    const violations = await resourceViolations(
      networkPolicy((policy) => {
        if (from === undefined) delete policy.spec!.ingress![0]!.from;
        else policy.spec!.ingress![0]!.from = from;
      }),
    );
    expect(violations).toEqual([{ policy: "ingress-from-scoped-peers", message }]);
  });
});

describe("a NetworkPolicy's egress", () => {
  it("a rule allowing NATS (4222) violates egress-excludes-control-plane-ports", async () => {
    const violations = await resourceViolations(
      networkPolicy((policy) => {
        policy.spec!.egress![1]!.ports!.push({ protocol: "TCP", port: 4222 });
      }),
    );
    expect(violations).toEqual([
      {
        policy: "egress-excludes-control-plane-ports",
        message: "egress rule 1 allows control-plane port 4222",
      },
    ]);
  });

  it.each([
    ["a port range covering the API server (6000-7000)", { port: 6000, endPort: 7000 }],
    ["the kubelet port (10250)", { port: 10250 }],
    ["the agent-sessions server port as a string ('8787')", { port: "8787" }],
    ["a named port", { port: "http" }],
    ["a protocol with no port (every port)", { protocol: "TCP" }],
  ])("a rule allowing %s violates egress-excludes-control-plane-ports", async (_, port) => {
    const violated = await violatedBy(
      networkPolicy((policy) => {
        policy.spec!.egress![1]!.ports = [port];
      }),
    );
    expect(violated).toEqual(["egress-excludes-control-plane-ports"]);
  });

  it("a rule with no ports violates egress-excludes-control-plane-ports", async () => {
    const violated = await violatedBy(
      networkPolicy((policy) => {
        delete policy.spec!.egress![1]!.ports;
      }),
    );
    expect(violated).toEqual(["egress-excludes-control-plane-ports"]);
  });

  it("a rule with no destinations violates egress-excludes-control-plane-ports", async () => {
    const violated = await violatedBy(
      networkPolicy((policy) => {
        delete policy.spec!.egress![0]!.to;
      }),
    );
    expect(violated).toEqual(["egress-excludes-control-plane-ports"]);
  });

  it("an allow-all rule ({}) violates egress-excludes-control-plane-ports twice over", async () => {
    const violations = await resourceViolations(
      networkPolicy((policy) => {
        policy.spec!.egress = [{}];
      }),
    );
    expect(violations.map((v) => v.message)).toEqual([
      'egress rule 0 allows every destination (no "to" peers)',
      'egress rule 0 allows every port (no "ports")',
    ]);
  });

  it("the forbidden ports come from the policy config", async () => {
    const config = { "egress-excludes-control-plane-ports": { forbiddenPorts: [443] } };
    expect(await violatedBy(networkPolicy(), config)).toEqual(["egress-excludes-control-plane-ports"]);
    const allowNats = networkPolicy((policy) => {
      policy.spec!.egress![0]!.ports = [{ port: 4222 }];
    });
    expect(
      await violatedBy(allowNats, { "egress-excludes-control-plane-ports": { forbiddenPorts: [] } }),
    ).toEqual([]);
  });
});

describe("a session's ports (issue 40)", () => {
  const ports = { "session-ports-declared": { harnessPorts: [8080], declaredPorts: [3000] } };

  it("a Service and NetworkPolicy naming the adapter's port and a declared one pass", async () => {
    const withDeclared = service((s) => {
      s.spec!.ports = [
        { name: "adapter", port: 8080, targetPort: 8080 },
        { name: "web", port: 3000, targetPort: 3000 },
      ];
    });
    const admitted = networkPolicy((p) => {
      p.spec!.ingress![0]!.ports = [
        { protocol: "TCP", port: 8080 },
        { protocol: "TCP", port: 3000 },
      ];
    });
    expect(await violatedBy(withDeclared, ports)).toEqual([]);
    expect(await violatedBy(admitted, ports)).toEqual([]);
  });

  it("a Service port that is not declared violates session-ports-declared", async () => {
    const undeclared = service((s) => {
      s.spec!.ports = [
        { name: "adapter", port: 8080, targetPort: 8080 },
        { name: "web", port: 3001, targetPort: 3001 },
      ];
    });
    expect(await violatedBy(undeclared, ports)).toEqual(["session-ports-declared"]);
    // Declared on the Service's side, another port behind it.
    const retargeted = service((s) => {
      s.spec!.ports = [{ name: "web", port: 3000, targetPort: 22 }];
    });
    expect(await violatedBy(retargeted, ports)).toEqual(["session-ports-declared"]);
  });

  it("a NetworkPolicy admitting an undeclared port, a range or every port violates session-ports-declared", async () => {
    for (const change of [
      (p: NonNullable<Parameters<Parameters<typeof networkPolicy>[0] & object>[0]>) => {
        p.spec!.ingress![0]!.ports = [{ protocol: "TCP", port: 3001 }];
      },
      (p: NonNullable<Parameters<Parameters<typeof networkPolicy>[0] & object>[0]>) => {
        p.spec!.ingress![0]!.ports = [{ protocol: "TCP", port: 3000, endPort: 3005 }];
      },
      (p: NonNullable<Parameters<Parameters<typeof networkPolicy>[0] & object>[0]>) => {
        delete p.spec!.ingress![0]!.ports;
      },
    ])
      expect(await violatedBy(networkPolicy(change), ports)).toEqual(["session-ports-declared"]);
    // Without the session's config the pack knows only the adapter's port: 3000 is refused too.
    const declared = networkPolicy((p) => {
      p.spec!.ingress![0]!.ports = [{ protocol: "TCP", port: 3000 }];
    });
    expect(await violatedBy(declared)).toEqual(["session-ports-declared"]);
  });
});
