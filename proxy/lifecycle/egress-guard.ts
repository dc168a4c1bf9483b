import { z } from "zod";
import {
  ALWAYS_FORBIDDEN,
  CONTROL_PLANE_PORTS,
  type EgressRule,
  egressRuleProblem,
  type ForbiddenDestination,
  parseCidr,
} from "../../contracts/egress.ts";
import { CodedError } from "../../contracts/errors.ts";

/**
 * The server's egress guard: what no Agent's `egress` may reach, whatever the Agent says, for
 * sessions and one-shot AgentRuns alike. On top of what the contract always refuses (loopback,
 * link-local and cloud metadata, unspecified, multicast, reserved, anything wider than /16:
 * contracts/egress.ts) it refuses the control-plane ports and the server's own port on every
 * address, and the ranges the operator lists in AGENT_SESSIONS_EGRESS_DENY (the cluster's pod
 * and service ranges, the runners' and engines' addresses, with or without a port).
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

export type EgressGuardOptions = {
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

  constructor(options: EgressGuardOptions = {}) {
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
    return egressRuleProblem(rule, this.forbidden);
  }

  /**
   * Throws `code` naming every refused rule of `owner` (e.g. "Agent default/alpha") and why, with
   * `field_violations` at `spec.egress.<i>`.
   */
  assertAllowed(
    rules: readonly EgressRule[],
    owner: string,
    code: "INVALID_ARGUMENT" | "FAILED_PRECONDITION" = "INVALID_ARGUMENT",
  ): void {
    const violations = rules.flatMap((rule, i) => {
      const why = this.problem(rule);
      return why ? [{ field: `spec.egress.${i}`, description: `egress rule ${why}` }] : [];
    });
    if (violations.length === 0) return;
    throw new CodedError(
      code,
      `${owner} may not reach: ${violations.map((v) => `${v.field}: ${v.description}`).join("; ")}`,
      { reason: "EgressForbidden", field_violations: violations },
    );
  }
}
