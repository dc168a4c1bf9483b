import { BlockList } from "node:net";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { EgressRule, formatIpv4, parseIpv4 } from "../../contracts/egress.ts";
import { EgressAllowList, EgressDenyList, EgressGuard } from "./egress-guard.ts";

describe("the egress guard (property)", () => {
  const deny = [{ cidr: "10.96.0.0/12" }, { cidr: "10.244.0.0/16" }, { cidr: "192.168.7.10", port: 2375 }];
  // Everything the operator could allow: the property is about what stays refused within it.
  const guard = new EgressGuard({ serverPort: 18787, deny, allow: [{ cidr: "0.0.0.0/0" }] });
  /** An independent oracle of what must stay unreachable, built with node:net. */
  const everyPort = new BlockList();
  for (const [net, prefix] of [
    ["0.0.0.0", 8],
    ["127.0.0.0", 8],
    ["169.254.0.0", 16],
    ["224.0.0.0", 4],
    ["240.0.0.0", 4],
    ["10.96.0.0", 12],
    ["10.244.0.0", 16],
  ] as const)
    everyPort.addSubnet(net, prefix);
  const firsts = ["0.0.0.0", "127.0.0.0", "169.254.0.0", "224.0.0.0", "240.0.0.0", "10.96.0.0", "10.244.0.0"];
  const forbiddenPorts = [4222, 6443, 2379, 2380, 10250, 8787, 18787];

  const octet = fc.oneof(fc.integer({ min: 0, max: 255 }), fc.constantFrom(0, 10, 127, 169, 254, 224, 255));
  const address = fc.oneof(
    fc.tuple(octet, octet, octet, octet).map((o) => o.join(".")),
    fc.constantFrom("169.254.169.254", "127.0.0.1", "10.96.0.1", "10.244.3.4", "192.168.7.10", "10.213.0.1"),
  );
  const rule = fc.record({
    cidr: fc.oneof(
      address,
      fc.tuple(address, fc.integer({ min: 0, max: 40 })).map(([a, p]) => {
        // Mostly aligned networks (so many are accepted), sometimes with host bits left in.
        const parsed = parseIpv4(a) ?? 0;
        const size = 2 ** (32 - Math.min(p, 32));
        return `${formatIpv4(p <= 32 ? Math.floor(parsed / size) * size : parsed)}/${p}`;
      }),
      fc.string({ maxLength: 20 }),
    ),
    port: fc.oneof(fc.integer({ min: 1, max: 65535 }), fc.constantFrom(2375, 8787, 18787, 6443, 11434)),
  });

  it("no accepted rule reaches a forbidden destination", () => {
    let accepted = 0;
    fc.assert(
      fc.property(rule, (r) => {
        if (!EgressRule.safeParse(r).success || guard.problem(r) !== undefined) return;
        accepted++;
        const [net = "", bits = "32"] = r.cidr.split("/");
        const ruleBlock = new BlockList();
        ruleBlock.addSubnet(net, Number(bits));
        expect(Number(bits)).toBeGreaterThanOrEqual(16);
        // Two CIDR blocks overlap iff one holds the other's first address.
        expect(everyPort.check(net)).toBe(false);
        for (const first of firsts) expect(ruleBlock.check(first)).toBe(false);
        expect(forbiddenPorts).not.toContain(r.port);
        if (r.port === 2375) expect(ruleBlock.check("192.168.7.10")).toBe(false);
      }),
      { numRuns: 5000 },
    );
    // The generator must reach the accepting side too, or the property says nothing.
    expect(accepted).toBeGreaterThan(200);
  });
});

describe("AGENT_SESSIONS_EGRESS_DENY", () => {
  it("reads cidr and cidr:port entries and refuses anything else", () => {
    expect(EgressDenyList.parse("10.96.0.0/12, 10.0.0.5:2375,")).toEqual([
      { cidr: "10.96.0.0/12" },
      { cidr: "10.0.0.5", port: 2375 },
    ]);
    expect(EgressDenyList.safeParse("10.0.0.5:99999").success).toBe(false);
    expect(EgressDenyList.safeParse("10.0.0.0/33").error?.issues[0]?.message).toMatch(
      /"10.0.0.0\/33" is not cidr or cidr:port \(10.0.0.0\/33 has a prefix length outside 0-32\)/,
    );
  });
});

describe("AGENT_SESSIONS_EGRESS_ALLOW", () => {
  it("reads cidr, cidr:port and cidr:first-last entries and refuses anything else", () => {
    expect(EgressAllowList.parse("10.213.0.1:11434, 10.0.0.0/24:8000-8999,192.168.5.7,")).toEqual([
      { cidr: "10.213.0.1", ports: { first: 11434, last: 11434 } },
      { cidr: "10.0.0.0/24", ports: { first: 8000, last: 8999 } },
      { cidr: "192.168.5.7" },
    ]);
    for (const bad of [
      "10.0.0.1:0",
      "10.0.0.1:70000",
      "10.0.0.1:9-8",
      "model.internal:8080",
      "10.0.0.1/8:443",
    ])
      expect([bad, EgressAllowList.safeParse(bad).success]).toEqual([bad, false]);
  });

  it("admits a rule only inside an entry, by range and port; outside it says which setting", () => {
    const guard = new EgressGuard({
      allow: EgressAllowList.parse("10.213.0.1:11434,10.0.0.0/24:8000-8999"),
    });
    expect(guard.problem({ cidr: "10.213.0.1/32", port: 11434 })).toBeUndefined();
    expect(guard.problem({ cidr: "10.0.0.128/25", port: 8080 })).toBeUndefined();
    expect(guard.problem({ cidr: "10.213.0.1", port: 5000 })).toMatch(
      /10.213.0.1:5000 is not a destination the operator allows \(AGENT_SESSIONS_EGRESS_ALLOW allows only 10.213.0.1:11434, 10.0.0.0\/24:8000-8999\)/,
    );
    expect(guard.problem({ cidr: "10.0.0.0/23", port: 8080 })).toBeDefined();
    expect(guard.problem({ cidr: "10.0.0.1", port: 9000 })).toBeDefined();
    expect(new EgressGuard().problem({ cidr: "10.213.0.1", port: 11434 })).toMatch(/is empty/);
  });

  it("refuses an Agent outside it with FAILED_PRECONDITION (EgressNotAllowed), a forbidden rule first as INVALID_ARGUMENT", () => {
    const guard = new EgressGuard({ allow: [{ cidr: "10.213.0.0/16" }] });
    const thrown = (rules: { cidr: string; port: number }[]) => {
      try {
        guard.assertAllowed(rules, "Agent default/a");
      } catch (e) {
        return e;
      }
    };
    expect(thrown([{ cidr: "172.20.0.1", port: 2375 }])).toMatchObject({
      code: "FAILED_PRECONDITION",
      details: { reason: "EgressNotAllowed", setting: "AGENT_SESSIONS_EGRESS_ALLOW" },
    });
    expect(
      thrown([
        { cidr: "172.20.0.1", port: 2375 },
        { cidr: "10.213.0.1", port: 4222 },
      ]),
    ).toMatchObject({ code: "INVALID_ARGUMENT", details: { reason: "EgressForbidden" } });
  });
});

describe("EgressGuard", () => {
  it("refuses the server's own port and the control-plane ports on every address", () => {
    const guard = new EgressGuard({ allow: [{ cidr: "10.0.0.0/8" }] });
    guard.addServerPort(18787);
    expect(guard.forbiddenPorts).toEqual([2379, 2380, 4222, 6443, 8787, 10250, 18787]);
    expect(guard.problem({ cidr: "10.213.0.1", port: 18787 })).toMatch(
      /10.213.0.1:18787 reaches a control-plane port or the server's own port/,
    );
    expect(guard.problem({ cidr: "10.213.0.1", port: 6443 })).toBeDefined();
    expect(guard.problem({ cidr: "10.213.0.1", port: 11434 })).toBeUndefined();
  });

  it("refuses what the operator denies, by range and by port", () => {
    const guard = new EgressGuard({
      allow: [{ cidr: "10.0.0.0/8" }],
      deny: [{ cidr: "10.96.0.0/12" }, { cidr: "10.0.0.5", port: 2375 }],
    });
    expect(guard.problem({ cidr: "10.100.0.0/16", port: 443 })).toMatch(
      /reaches 10.96.0.0\/12, which the operator denies \(AGENT_SESSIONS_EGRESS_DENY\)/,
    );
    expect(guard.problem({ cidr: "10.0.0.0/24", port: 2375 })).toMatch(/10.0.0.5:2375/);
    expect(guard.problem({ cidr: "10.0.0.0/24", port: 443 })).toBeUndefined();
  });

  it("names every refused rule with its field in one INVALID_ARGUMENT", () => {
    const guard = new EgressGuard();
    const error = (() => {
      try {
        guard.assertAllowed(
          [
            { cidr: "10.0.0.1", port: 443 },
            { cidr: "10.0.0.2", port: 4222 },
          ],
          "Agent default/a",
        );
      } catch (e) {
        return e;
      }
    })();
    expect(error).toMatchObject({
      code: "INVALID_ARGUMENT",
      details: { reason: "EgressForbidden", field_violations: [{ field: "spec.egress.1" }] },
    });
    expect(String((error as Error).message)).toMatch(
      /Agent default\/a may not reach: spec.egress.1: egress rule 10.0.0.2:4222/,
    );
  });
});

describe("the model endpoint (issue 35: the gateway carries the Agent's credential there)", () => {
  const guard = new EgressGuard({
    serverPort: 18787,
    allow: [{ cidr: "10.213.0.0/24", ports: { first: 1024, last: 65535 } }],
  });
  const refusal = (url: string) => {
    try {
      guard.assertModelAllowed(url, "Agent default/a");
      return undefined;
    } catch (error) {
      const e = error as { code: string; message: string; details?: { reason?: string } };
      return { code: e.code, reason: e.details?.reason, message: e.message };
    }
  };

  it("admits an endpoint the operator allows, by address and port", () => {
    expect(refusal("http://10.213.0.1:11434/v1")).toBeUndefined();
  });

  it("refuses loopback, the control plane's ports, what is outside the allow-list, and host names", () => {
    expect(refusal("http://127.0.0.1:11434/v1")).toMatchObject({
      code: "INVALID_ARGUMENT",
      reason: "EgressForbidden",
    });
    expect(refusal("http://10.213.0.1:18787/v1")).toMatchObject({
      code: "INVALID_ARGUMENT",
      reason: "EgressForbidden",
    });
    expect(refusal("http://169.254.169.254/latest")).toMatchObject({ reason: "EgressForbidden" });
    expect(refusal("http://10.9.0.1:11434/v1")).toMatchObject({
      code: "FAILED_PRECONDITION",
      reason: "EgressNotAllowed",
    });
    // Port 80 implied: outside the allowed ports.
    expect(refusal("http://10.213.0.1/v1")).toMatchObject({ code: "FAILED_PRECONDITION" });
    const named = refusal("https://api.example.com/v1");
    expect(named).toMatchObject({ code: "INVALID_ARGUMENT" });
    expect(named?.message).toContain("spec.model.baseUrl must name its host by an IPv4 address");
  });
});
