import { lookup as dnsLookup, type LookupAddress } from "node:dns";
import { BlockList, isIP } from "node:net";
import { z } from "zod";
import { ALWAYS_FORBIDDEN, formatIpv4 } from "../../contracts/egress.ts";

/**
 * The webhook egress guard (issue 40), like the Agent egress guard (egress-guard.ts): the server
 * posts to receivers its tenants name, so a receiver's URL must not make the server reach the
 * machine itself or its cloud metadata service. Refused, on every address the URL's host
 * resolves to (not only the URL's text: a name can resolve to 127.0.0.1): the ranges the
 * contract always refuses (contracts/egress.ts: 0/8, loopback, link-local and metadata
 * 169.254/16, multicast, reserved), IPv6 loopback, unspecified, link-local, multicast, the
 * IPv4-mapped forms of the refused IPv4 ranges and AWS's IPv6 metadata address. An operator
 * lets some through with AGENT_SESSIONS_WEBHOOK_EGRESS_ALLOW (e.g. `127.0.0.1/32` for a receiver
 * on the same host). The connection is made to the addresses checked (webhook-sender.ts pins
 * them), so a name that resolves differently between the check and the connection cannot get
 * around it.
 */

/** `127.0.0.1/32,fd00::/8,::1` → CIDRs (an address alone: just it); a bad entry is a configuration error. */
export const WebhookEgressAllowList = z.string().transform((text, ctx): string[] => {
  const out: string[] = [];
  for (const item of text
    .split(",")
    .map((s) => s.trim())
    .filter(Boolean)) {
    const [address = "", prefix, ...rest] = item.split("/");
    const family = isIP(address);
    const bits = prefix === undefined ? (family === 6 ? 128 : 32) : Number(prefix);
    if (
      family === 0 ||
      rest.length > 0 ||
      !Number.isInteger(bits) ||
      bits < 0 ||
      bits > (family === 6 ? 128 : 32)
    ) {
      ctx.addIssue({ code: "custom", message: `"${item}" is not an IPv4 or IPv6 address or CIDR` });
      return z.NEVER;
    }
    out.push(`${address}/${bits}`);
  }
  return out;
});

const REFUSED_V6: readonly { cidr: string; why: string }[] = [
  { cidr: "::/128", why: "the unspecified address ::" },
  { cidr: "::1/128", why: "loopback ::1 (the host itself)" },
  { cidr: "fe80::/10", why: "link-local fe80::/10" },
  { cidr: "ff00::/8", why: "multicast ff00::/8" },
  { cidr: "fd00:ec2::254/128", why: "the cloud metadata service fd00:ec2::254" },
];

type Rule = { list: BlockList; why: string };

function rules(): Rule[] {
  const out: Rule[] = [];
  for (const f of ALWAYS_FORBIDDEN) {
    const list = new BlockList();
    list.addRange(formatIpv4(f.range.first), formatIpv4(f.range.last), "ipv4");
    out.push({ list, why: f.why });
  }
  for (const f of REFUSED_V6) {
    const list = new BlockList();
    const [address = "", bits = "128"] = f.cidr.split("/");
    list.addSubnet(address, Number(bits), "ipv6");
    out.push({ list, why: f.why });
  }
  return out;
}

export type Resolve = (host: string) => Promise<LookupAddress[]>;

const systemResolve: Resolve = (host) =>
  new Promise((resolve, reject) =>
    dnsLookup(host, { all: true }, (error, addresses) => (error ? reject(error) : resolve(addresses))),
  );

export class WebhookEgress {
  readonly #refused = rules();
  readonly #allowed = new BlockList();
  readonly #resolve: Resolve;

  /** `allow`: CIDRs from AGENT_SESSIONS_WEBHOOK_EGRESS_ALLOW. @default none */
  constructor(allow: readonly string[] = [], resolve: Resolve = systemResolve) {
    for (const cidr of allow) {
      const [address = "", bits = ""] = cidr.split("/");
      const family = isIP(address) === 6 ? "ipv6" : "ipv4";
      this.#allowed.addSubnet(address, Number(bits), family);
    }
    this.#resolve = resolve;
  }

  /** Why the server may not post to `address`, or undefined when it may. */
  refusal(address: string): string | undefined {
    const family = isIP(address);
    if (family === 0) return `${address} is not an IP address`;
    const type = family === 6 ? "ipv6" : "ipv4";
    if (this.#allowed.check(address, type)) return undefined;
    const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address)?.[1];
    if (mapped !== undefined) return this.refusal(mapped);
    const rule = this.#refused.find((r) => r.list.check(address, type));
    return rule ? `${address} is ${rule.why}` : undefined;
  }

  /**
   * The addresses `host` resolves to, all allowed; else why not (a refused address among them, or
   * the name not resolving).
   */
  async resolve(
    host: string,
  ): Promise<{ ok: true; addresses: LookupAddress[] } | { ok: false; why: string }> {
    const bare = host.startsWith("[") && host.endsWith("]") ? host.slice(1, -1) : host;
    let addresses: LookupAddress[];
    if (isIP(bare) !== 0) addresses = [{ address: bare, family: isIP(bare) }];
    else {
      try {
        addresses = await this.#resolve(bare);
      } catch (error) {
        return {
          ok: false,
          why: `${bare} does not resolve (${(error as { code?: string }).code ?? String(error)})`,
        };
      }
      if (addresses.length === 0) return { ok: false, why: `${bare} does not resolve` };
    }
    for (const { address } of addresses) {
      const why = this.refusal(address);
      if (why !== undefined)
        return {
          ok: false,
          why: isIP(bare) !== 0 ? why : `${bare} resolves to ${why}`,
        };
    }
    return { ok: true, addresses };
  }
}
