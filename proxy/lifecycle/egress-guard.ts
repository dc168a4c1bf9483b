import { z } from "zod";
import {
  ALWAYS_FORBIDDEN,
  CONTROL_PLANE_PORTS,
  type EgressRule,
  egressRuleProblem,
  type ForbiddenDestination,
  type Ipv4Range,
  parseCidr,
} from "../../contracts/egress.ts";
import { CodedError } from "../../contracts/errors.ts";

/**
 * The server's egress guard, for sessions and one-shot AgentRuns alike. Egress is an allow-list
 * the operator sets (AGENT_SESSIONS_EGRESS_ALLOW: the model endpoints, git servers… sessions may
 * reach); an Agent's `egress` chooses within it, and a rule outside it is FAILED_PRECONDITION
 * naming the setting (the Agent is fine; the server does not offer that destination). Empty (the
 * default) allows nothing. Within the allow-list, some destinations are refused whatever the
 * operator wrote (INVALID_ARGUMENT): what the contract always refuses (loopback, link-local and
 * cloud metadata, unspecified, multicast, reserved, anything wider than /16: contracts/egress.ts),
 * the control-plane ports and the server's own port on every address, and what the operator lists
 * in AGENT_SESSIONS_EGRESS_DENY (holes in a wide allowed range, e.g. a registry on a bridge).
 */

/** One `AGENT_SESSIONS_EGRESS_DENY` entry: `cidr` (every port) or `cidr:port`. */
export type EgressDeny = { cidr: string; port?: number };

/** `10.96.0.0/12,10.244.0.0/16,10.0.0.5:2375` → entries; a bad one is a configuration error. */
export const EgressDenyList = z.string().transform((text, ctx): EgressDeny[] => {
  const out: EgressDeny[] = [];
  for (const item of text
    .split(",")
    .map((s) => s.trim())
    .filter(Boolean)) {
    const [cidr = "", port, ...rest] = item.split(":");
    const parsed = parseCidr(cidr);
    const portNumber = port === undefined ? undefined : Number(port);
    if (
      !parsed.ok ||
      rest.length > 0 ||
      (portNumber !== undefined && !(Number.isInteger(portNumber) && portNumber >= 1 && portNumber <= 65535))
    ) {
      ctx.addIssue({
        code: "custom",
        message: `"${item}" is not cidr or cidr:port${parsed.ok ? "" : ` (${cidr} ${parsed.why})`}`,
      });
      return z.NEVER;
    }
    out.push(portNumber === undefined ? { cidr } : { cidr, port: portNumber });
  }
  return out;
});

/** One `AGENT_SESSIONS_EGRESS_ALLOW` entry: a range and, optionally, an inclusive port range. */
export type EgressAllow = { cidr: string; ports?: { first: number; last: number } };

const PORT = /^(?:[1-9][0-9]{0,4})$/;
const validPort = (text: string) => PORT.test(text) && Number(text) <= 65535;

/**
 * `10.213.0.1:11434,10.0.0.0/24:8000-8999,192.168.5.7` → entries: `cidr` (every port), `cidr:port`
 * or `cidr:first-last`. IPv4 only, like an Agent's rules (a name would resolve differently on the
 * server, the runner and the session). A bad entry is a configuration error.
 */
export const EgressAllowList = z.string().transform((text, ctx): EgressAllow[] => {
  const out: EgressAllow[] = [];
  for (const item of text
    .split(",")
    .map((s) => s.trim())
    .filter(Boolean)) {
    const [cidr = "", ports, ...rest] = item.split(":");
    const parsed = parseCidr(cidr);
    const [first = "", last = first, ...more] = ports === undefined ? [] : ports.split("-");
    const portsOk =
      ports === undefined ||
      (more.length === 0 && validPort(first) && validPort(last) && Number(first) <= Number(last));
    if (!parsed.ok || rest.length > 0 || !portsOk) {
      ctx.addIssue({
        code: "custom",
        message: `"${item}" is not cidr, cidr:port or cidr:first-last${parsed.ok ? "" : ` (${cidr} ${parsed.why})`}`,
      });
      return z.NEVER;
    }
    out.push(ports === undefined ? { cidr } : { cidr, ports: { first: Number(first), last: Number(last) } });
  }
  return out;
});

/** An allow entry as the setting writes it. */
export function formatEgressAllow(entry: EgressAllow): string {
  if (!entry.ports) return entry.cidr;
  const { first, last } = entry.ports;
  return `${entry.cidr}:${first === last ? first : `${first}-${last}`}`;
}

export type EgressGuardOptions = {
  /** AGENT_SESSIONS_EGRESS_ALLOW: the only destinations an Agent may name. @default none (nothing) */
  allow?: readonly EgressAllow[];
  /** The server's listening port (0: not known yet; see `addServerPort`). */
  serverPort?: number;
  /** AGENT_SESSIONS_EGRESS_DENY. @default none */
  deny?: readonly EgressDeny[];
  /** Ports refused on every address. @default CONTROL_PLANE_PORTS */
  controlPlanePorts?: readonly number[];
};

export class EgressGuard {
  readonly #deny: ForbiddenDestination[];
  readonly #ports: Set<number>;
  readonly #allow: { entry: EgressAllow; range: Ipv4Range }[];

  constructor(options: EgressGuardOptions = {}) {
    this.#allow = (options.allow ?? []).map((entry) => {
      const parsed = parseCidr(entry.cidr);
      if (!parsed.ok) throw new Error(`egress allow entry ${entry.cidr} ${parsed.why}`);
      return { entry, range: parsed.range };
    });
    this.#ports = new Set(options.controlPlanePorts ?? CONTROL_PLANE_PORTS);
    if (options.serverPort) this.#ports.add(options.serverPort);
    this.#deny = (options.deny ?? []).map(({ cidr, port }) => {
      const parsed = parseCidr(cidr);
      if (!parsed.ok) throw new Error(`egress deny entry ${cidr} ${parsed.why}`);
      return {
        range: parsed.range,
        ...(port === undefined ? {} : { ports: [port] }),
        why: `${cidr}${port === undefined ? "" : `:${port}`}, which the operator denies (AGENT_SESSIONS_EGRESS_DENY)`,
      };
    });
  }

  /** The port the server listens on, once known (it may have asked for port 0). */
  addServerPort(port: number): void {
    if (port > 0) this.#ports.add(port);
  }

  /** Ports refused on every address: what the policy pack is given on every `up`. */
  get forbiddenPorts(): number[] {
    return [...this.#ports].sort((a, b) => a - b);
  }

  /** Everything refused: the contract's ranges, the ports on every address, the operator's list. */
  get forbidden(): ForbiddenDestination[] {
    return [
      ...ALWAYS_FORBIDDEN,
      {
        range: { first: 0, last: 2 ** 32 - 1 },
        ports: this.forbiddenPorts,
        why: "a control-plane port or the server's own port",
      },
      ...this.#deny,
    ];
  }

  /** Why `rule` is refused, or undefined. */
  problem(rule: EgressRule): string | undefined {
    return egressRuleProblem(rule, this.forbidden) ?? this.outsideAllowed(rule);
  }

  /** Why `rule` is outside AGENT_SESSIONS_EGRESS_ALLOW (its whole range, its port), or undefined. */
  outsideAllowed(rule: EgressRule): string | undefined {
    const parsed = parseCidr(rule.cidr);
    if (!parsed.ok) return `${rule.cidr} ${parsed.why}`;
    const inside = this.#allow.some(
      ({ entry, range }) =>
        range.first <= parsed.range.first &&
        parsed.range.last <= range.last &&
        (entry.ports === undefined || (entry.ports.first <= rule.port && rule.port <= entry.ports.last)),
    );
    if (inside) return undefined;
    const allowed =
      this.#allow.length === 0
        ? "AGENT_SESSIONS_EGRESS_ALLOW is empty: the operator allows no egress"
        : `AGENT_SESSIONS_EGRESS_ALLOW allows only ${this.#allow.map(({ entry }) => formatEgressAllow(entry)).join(", ")}`;
    return `${rule.cidr}:${rule.port} is not a destination the operator allows (${allowed})`;
  }

  /**
   * The Agent's model endpoint is a destination too: the runner's model gateway connects to it
   * with the Agent's real credential, so it must be one the operator allows, like an egress rule
   * (an endpoint on loopback, a control-plane port or outside AGENT_SESSIONS_EGRESS_ALLOW would
   * have the gateway carry the key there). Named by an IPv4 address: a host name could resolve to
   * anything at the moment of the call. Throws like `assertAllowed`, at `spec.model.baseUrl`.
   */
  assertModelAllowed(
    baseUrl: string,
    owner: string,
    code: "INVALID_ARGUMENT" | "FAILED_PRECONDITION" = "INVALID_ARGUMENT",
  ): void {
    this.assertGatewayUpstreamAllowed(baseUrl, owner, {
      code,
      field: "spec.model.baseUrl",
      what: "its model",
      credential: "the Agent's credential",
    });
  }

  /**
   * A destination the runner's gateway connects to with a credential (a model endpoint, an MCP
   * server's URL: contracts/mcp.ts): allowed like an egress rule, named by an IPv4 address.
   */
  assertGatewayUpstreamAllowed(
    target: string,
    owner: string,
    options: {
      code: "INVALID_ARGUMENT" | "FAILED_PRECONDITION";
      field: string;
      what: string;
      credential: string;
    },
  ): void {
    const { code, field, what, credential } = options;
    const url = new URL(target);
    const host = url.hostname;
    if (!/^\d{1,3}(\.\d{1,3}){3}$/.test(host))
      throw new CodedError(
        "INVALID_ARGUMENT",
        `${owner}: ${field} must name its host by an IPv4 address the operator allows (AGENT_SESSIONS_EGRESS_ALLOW), not "${host}": the gateway connects there with ${credential}`,
        { reason: "EgressForbidden", field_violations: [{ field, description: "not an IPv4 address" }] },
      );
    const rule = { cidr: `${host}/32`, port: Number(url.port || (url.protocol === "https:" ? 443 : 80)) };
    const forbidden = egressRuleProblem(rule, this.forbidden);
    if (forbidden)
      throw new CodedError(code, `${owner} may not reach ${what}: ${field}: ${forbidden}`, {
        reason: "EgressForbidden",
        field_violations: [{ field, description: forbidden }],
      });
    const outside = this.outsideAllowed(rule);
    if (outside)
      throw new CodedError("FAILED_PRECONDITION", `${owner} may not reach ${what}: ${field}: ${outside}`, {
        reason: "EgressNotAllowed",
        setting: "AGENT_SESSIONS_EGRESS_ALLOW",
        field_violations: [{ field, description: outside }],
      });
  }

  /**
   * Throws `code` naming every refused rule of `owner` (e.g. "Agent default/alpha") and why, with
   * `field_violations` at `spec.egress.<i>`; when every refused rule is only outside the
   * operator's allow-list, FAILED_PRECONDITION (reason EgressNotAllowed) naming the setting.
   */
  assertAllowed(
    rules: readonly EgressRule[],
    owner: string,
    code: "INVALID_ARGUMENT" | "FAILED_PRECONDITION" = "INVALID_ARGUMENT",
  ): void {
    const violations = (check: (rule: EgressRule) => string | undefined) =>
      rules.flatMap((rule, i) => {
        const why = check(rule);
        return why ? [{ field: `spec.egress.${i}`, description: `egress rule ${why}` }] : [];
      });
    const message = (v: { field: string; description: string }[]) =>
      `${owner} may not reach: ${v.map((x) => `${x.field}: ${x.description}`).join("; ")}`;
    const forbidden = violations((rule) => egressRuleProblem(rule, this.forbidden));
    if (forbidden.length > 0)
      throw new CodedError(code, message(forbidden), {
        reason: "EgressForbidden",
        field_violations: forbidden,
      });
    const outside = violations((rule) => this.outsideAllowed(rule));
    if (outside.length > 0)
      throw new CodedError("FAILED_PRECONDITION", message(outside), {
        reason: "EgressNotAllowed",
        setting: "AGENT_SESSIONS_EGRESS_ALLOW",
        field_violations: outside,
      });
  }
}
