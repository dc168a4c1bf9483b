import { describe, expect, it } from "vitest";
import { EgressRule, formatIpv4, parseCidr, parseIpv4 } from "./egress.ts";

const refusal = (rule: unknown) => {
  const parsed = EgressRule.safeParse(rule);
  return parsed.success ? undefined : parsed.error.issues.map((i) => i.message).join("; ");
};

describe("EgressRule", () => {
  it.each([
    ["0.0.0.0/0", 443, /0\.0\.0\.0\/0 is wider than \/16/],
    ["169.254.169.254", 80, /link-local 169\.254\.0\.0\/16 \(cloud metadata/],
    ["127.0.0.1", 11434, /loopback/],
    ["999.1.1.1/99", 443, /999\.1\.1\.1\/99 is not an IPv4 address/],
    ["10.0.0.1/99", 443, /prefix length outside 0-32/],
    ["10.0.0.1/24", 443, /host bits set \(the network is 10\.0\.0\.0\/24\)/],
    ["010.0.0.1", 443, /not an IPv4 address/],
    ["0.0.0.0", 443, /unspecified/],
    ["224.0.0.251", 5353, /multicast/],
    ["255.255.255.255", 9, /reserved/],
    ["10.0.0.0/15", 443, /wider than \/16/],
    ["10.0.0.1 ", 443, /not an IPv4 address/],
  ])("refuses %s:%i naming the rule and why", (cidr, port, why) => {
    expect(refusal({ cidr, port })).toMatch(why);
  });

  it.each([
    ["10.213.0.1", 11434],
    ["10.213.0.1/32", 11434],
    ["192.168.0.0/16", 443],
    ["203.0.113.7", 443],
  ])("accepts %s:%i", (cidr, port) => {
    expect(refusal({ cidr, port })).toBeUndefined();
  });

  it("parses dotted quads and CIDRs as numbers", () => {
    expect(parseIpv4("10.213.0.1")).toBe(10 * 2 ** 24 + 213 * 2 ** 16 + 1);
    expect(formatIpv4(parseIpv4("255.0.128.1") ?? 0)).toBe("255.0.128.1");
    expect(parseCidr("10.96.0.0/12")).toMatchObject({ ok: true, prefix: 12 });
    expect(parseIpv4("1.2.3")).toBeUndefined();
  });
});
