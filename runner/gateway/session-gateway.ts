/**
 * What a session is given instead of its Agent's credentials (issue 35): for each credential
 * name a gateway token of its own, `MODEL_BASE_URL` pointing at this runner's model gateway
 * (gateway.ts), and an egress rule to the gateway. The real values stay in the runner
 * (routes.ts); nothing of them reaches the driver, the stack, the workload or its Secret. A
 * workspace's tokens are refused from the moment it is scaled down (and taken up again by its
 * resume, so its environment does not change), and die when it is removed; a one-shot run's
 * when it ends.
 */
import { CodedError } from "../../contracts/errors.ts";
import { MCP_SERVERS_ENV, type McpServerGrant } from "../../contracts/mcp.ts";
import type { GatewayGrant, RunnerCommand } from "../../contracts/runner-protocol.ts";
import type { EgressRule, SessionSpec } from "../../contracts/session-spec.ts";
import type { Gateway } from "./gateway.ts";
import type { GatewayRoutes } from "./routes.ts";

/** The key of a one-shot run's route (a workspace's is its container name). */
export function runRouteKey(runId: string): string {
  return `run:${runId}`;
}

export type GatewaySecrets = {
  /** What the session gets: the gateway URL and rule in place of the model's. */
  spec: SessionSpec;
  /** Credential name → gateway token: all the workload's environment ever holds. */
  credentials: Record<string, string>;
  /** The real value of the credential a workspace repository is fetched with, for the seeding only. */
  repoCredentials: Record<string, string>;
};

type RunOnce = Extract<RunnerCommand, { kind: "run_once" }>;

export class SessionGateway {
  readonly #routes: GatewayRoutes;
  readonly #gateway: Gateway | undefined;
  readonly #missing: string;

  /**
   * `gateway` undefined: this runner serves no gateway (`missing` says why and how to get one);
   * an Agent with a model is then refused, never given its credential values.
   */
  constructor(routes: GatewayRoutes, gateway: Gateway | undefined, missing = "") {
    this.#routes = routes;
    this.#gateway = gateway;
    this.#missing = missing;
  }

  get gateway(): Gateway | undefined {
    return this.#gateway;
  }

  /** A workspace's secrets, keeping its tokens when it has a route already (a re-provision). */
  forWorkspace(
    key: string,
    spec: SessionSpec,
    credentials: Record<string, string>,
    grant: GatewayGrant | undefined,
    mcp: readonly McpServerGrant[] = [],
  ): GatewaySecrets {
    const gateway = this.#require(grant, spec.env.MODEL_BASE_URL);
    if (mcp.length > 0 && !gateway)
      throw new CodedError(
        "FAILED_PRECONDITION",
        `this runner serves no gateway, and a session reaches MCP servers only through one: ${this.#missing}`,
      );
    const route = this.#routes.ensure(key, grant, credentials, mcp);
    const repo = spec.repo?.credential;
    let through = gateway && grant ? this.#through(spec, gateway, grant) : withoutModelUrl(spec);
    if (gateway && mcp.length > 0) through = withMcp(through, gateway, mcp);
    return {
      spec: through,
      credentials: { ...route.tokens },
      repoCredentials: repo && credentials[repo] !== undefined ? { [repo]: credentials[repo] } : {},
    };
  }

  /** A one-shot run's command with gateway tokens and URL; `done` drops its route. */
  forRun(command: RunOnce): RunOnce {
    const gateway = this.#require(command.gateway, command.env.MODEL_BASE_URL);
    const route = this.#routes.ensure(runRouteKey(command.run_id), command.gateway, command.credentials);
    const env = { ...command.env };
    let egress = command.egress;
    if (gateway && command.gateway) {
      env.MODEL_BASE_URL = gateway.baseUrlFor(command.gateway.upstream);
      egress = withRule(egress, gatewayRule(gateway));
    } else delete env.MODEL_BASE_URL;
    return { ...command, env, egress, credentials: { ...route.tokens } };
  }

  /** The key's tokens are refused from now on. */
  forget(key: string): void {
    this.#routes.drop(key);
  }

  /** The workspace stopped: its tokens are refused until its next provision takes them up again. */
  suspend(key: string): void {
    this.#routes.suspend(key);
  }

  #require(grant: GatewayGrant | undefined, modelUrl: string | undefined): Gateway | undefined {
    if ((grant || modelUrl) && !this.#gateway)
      throw new CodedError(
        "FAILED_PRECONDITION",
        `this runner serves no model gateway, and a session reaches its model only through one: ${this.#missing}`,
      );
    if (modelUrl && !grant)
      throw new CodedError(
        "FAILED_PRECONDITION",
        "the server sent a model URL without a gateway grant (an older server): upgrade the server",
      );
    return this.#gateway;
  }

  #through(spec: SessionSpec, gateway: Gateway, grant: GatewayGrant): SessionSpec {
    return {
      ...spec,
      env: { ...spec.env, MODEL_BASE_URL: gateway.baseUrlFor(grant.upstream) },
      egress: withRule(spec.egress, gatewayRule(gateway)),
    };
  }
}

function gatewayRule(gateway: Gateway): EgressRule {
  return { cidr: `${gateway.host}/32`, port: gateway.port };
}

function withRule(egress: readonly EgressRule[], rule: EgressRule): EgressRule[] {
  return egress.some((r) => r.cidr === rule.cidr && r.port === rule.port) ? [...egress] : [...egress, rule];
}

/**
 * The session's MCP servers: `MCP_SERVERS` (JSON `{<name>: <gateway URL>}`) and the egress rule to
 * the gateway; never a server's own URL (the session has no route to it) nor its credentials.
 */
function withMcp(spec: SessionSpec, gateway: Gateway, mcp: readonly McpServerGrant[]): SessionSpec {
  const urls = Object.fromEntries(mcp.map((server) => [server.name, gateway.mcpUrlFor(server.name)]));
  return {
    ...spec,
    env: { ...spec.env, [MCP_SERVERS_ENV]: JSON.stringify(urls) },
    egress: withRule(spec.egress, gatewayRule(gateway)),
  };
}

function withoutModelUrl(spec: SessionSpec): SessionSpec {
  if (spec.env.MODEL_BASE_URL === undefined) return spec;
  const { MODEL_BASE_URL: _dropped, ...env } = spec.env;
  return { ...spec, env };
}
