import { z } from "zod";

/**
 * Egress destinations a session or a one-shot run may be given (an Agent's `egress`), parsed as
 * IPv4 numbers rather than matched by a pattern: `999.1.1.1/99` is not an address, and ranges
 * that reach the machine itself, the link-local cloud metadata service or "everything" are
 * refused whatever the Agent says. The server adds what only it knows (its own address and port,
 * the cluster's ranges, the runner's and engine's addresses: proxy/lifecycle/egress-guard.ts).
 */

/** The narrowest prefix a rule may have: wider ranges reach too much to be "the model endpoint". */
export const MIN_EGRESS_PREFIX = 16;

/** An inclusive range of IPv4 addresses as unsigned 32-bit numbers. */
export type Ipv4Range = { first: number; last: number };

/** A destination no egress rule may reach: a range, on every port or on the listed ones. */
export type ForbiddenDestination = {
  range: Ipv4Range;
  /** Absent: every port. */
  ports?: readonly number[];
  /** Why, as said in the refusal ("loopback", "the server's own address and port"). */
  why: string;
};

/** Dotted-quad IPv4 (no leading zeros: `010` would mean octal to some parsers), or undefined. */
export function parseIpv4(text: string): number | undefined {
  const parts = text.split(".");
  if (parts.length !== 4) return undefined;
  let value = 0;
  for (const part of parts) {
    if (!/^(0|[1-9][0-9]{0,2})$/.test(part)) return undefined;
    const octet = Number(part);
    if (octet > 255) return undefined;
    value = value * 256 + octet;
  }
  return value;
}

export function formatIpv4(value: number): string {
  return [24, 16, 8, 0].map((shift) => Math.floor(value / 2 ** shift) % 256).join(".");
}

/** `a.b.c.d` (a /32) or `a.b.c.d/n` with no host bits set; a reason when it is neither. */
export function parseCidr(
  text: string,
): { ok: true; range: Ipv4Range; prefix: number } | { ok: false; why: string } {
  const slash = text.indexOf("/");
  const address = parseIpv4(slash < 0 ? text : text.slice(0, slash));
  if (address === undefined) return { ok: false, why: "is not an IPv4 address (four numbers 0-255)" };
  let prefix = 32;
  if (slash >= 0) {
    const bits = text.slice(slash + 1);
    if (!/^(0|[1-9][0-9]?)$/.test(bits) || Number(bits) > 32)
      return { ok: false, why: "has a prefix length outside 0-32" };
    prefix = Number(bits);
  }
  const size = 2 ** (32 - prefix);
  const first = Math.floor(address / size) * size;
  if (first !== address)
    return { ok: false, why: `has host bits set (the network is ${formatIpv4(first)}/${prefix})` };
  return { ok: true, range: { first, last: first + size - 1 }, prefix };
}

function range(cidr: string): Ipv4Range {
  const parsed = parseCidr(cidr);
  if (!parsed.ok) throw new Error(`bad built-in range ${cidr}`);
  return parsed.range;
}

/** Ranges no rule may touch on any port (RFC 6890 special-purpose registry). */
export const ALWAYS_FORBIDDEN: readonly ForbiddenDestination[] = [
  { range: range("0.0.0.0/8"), why: "the unspecified/'this network' range 0.0.0.0/8" },
  { range: range("127.0.0.0/8"), why: "loopback 127.0.0.0/8 (the host itself)" },
  { range: range("169.254.0.0/16"), why: "link-local 169.254.0.0/16 (cloud metadata services)" },
  { range: range("224.0.0.0/4"), why: "multicast 224.0.0.0/4" },
  { range: range("240.0.0.0/4"), why: "reserved 240.0.0.0/4 and broadcast" },
];

/** Ports of the control plane no rule may open on any address (the policy pack's default list). */
export const CONTROL_PLANE_PORTS: readonly number[] = [4222, 6443, 2379, 2380, 10250, 8787];

/** Why `rule` may not be allowed, or undefined when it may. */
export function egressRuleProblem(
  rule: { cidr: string; port: number },
  forbidden: readonly ForbiddenDestination[],
): string | undefined {
  const parsed = parseCidr(rule.cidr);
  if (!parsed.ok) return `${rule.cidr} ${parsed.why}`;
  if (parsed.prefix < MIN_EGRESS_PREFIX)
    return `${rule.cidr} is wider than /${MIN_EGRESS_PREFIX} (name the endpoint's address or a narrow range)`;
  for (const f of forbidden) {
    const overlaps = parsed.range.first <= f.range.last && f.range.first <= parsed.range.last;
    if (overlaps && (f.ports === undefined || f.ports.includes(rule.port)))
      return `${rule.cidr}:${rule.port} reaches ${f.why}`;
  }
  return undefined;
}

/** A destination a session may reach (the Agent's allowed model endpoints). */
export const EgressRule = z
  .object({
    /** An IPv4 address or CIDR (no host bits set), at most /16 wide. */
    cidr: z.string().max(18),
    port: z.number().int().min(1).max(65535),
  })
  .superRefine((rule, ctx) => {
    const problem = egressRuleProblem(rule, ALWAYS_FORBIDDEN);
    if (problem) ctx.addIssue({ code: "custom", path: ["cidr"], message: `egress rule ${problem}` });
  });
export type EgressRule = z.infer<typeof EgressRule>;
