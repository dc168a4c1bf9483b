/**
 * The model gateway's routes (issue 35): per workspace (or one-shot run) the Agent's grant, the
 * real credential values, and the gateway token the session holds in place of each value. The
 * values never leave the runner: the session's environment gets the tokens, the gateway swaps
 * them back on the way to the provider. Kept in memory and, when a file is given, in that file
 * (mode 0600, written whole to a temporary file then renamed, so a crash never leaves half of it)
 * so a restarted runner still answers the sessions it left running.
 */
import { createHash, randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { z } from "zod";
import { MCP_TOKEN_ENV, McpServerGrant } from "../../contracts/mcp.ts";
import { GatewayGrant } from "../../contracts/runner-protocol.ts";
import { writePrivateFile } from "./private-file.ts";

/** The routes file's name in the runner's data directory (the runner decides where; this is the usual name). */
export const GATEWAY_ROUTES_FILE_NAME = "gateway-routes.json";

/** What every gateway token starts with (a scanner can tell them from provider keys). */
export const GATEWAY_TOKEN_PREFIX = "asgw_";

export type GatewayRoute = {
  /** The workspace's container name, or `run:<run id>`. */
  key: string;
  /** The Agent's model; undefined: the Agent has no model (every call is refused). */
  grant: GatewayGrant | undefined;
  /** Credential name -> real value (never leaves the runner). */
  credentials: Record<string, string>;
  /** Credential name -> this route's gateway token (MCP_GATEWAY_TOKEN: the session's MCP token, no value behind it). */
  tokens: Record<string, string>;
  /** The Agent's MCP servers (mcp-forwarder.ts), their credential headers included; absent: none. */
  mcp?: McpServerGrant[];
  /**
   * Its workload is stopped: its tokens are refused and no credential value is kept; the next
   * `ensure` (the resume's provision) takes them up again, so the resumed workload's environment
   * is the one it had (a Kubernetes resume then only scales the Deployment back up).
   */
  suspended?: boolean;
};

const GatewayRouteRecord = z.object({
  key: z.string().min(1),
  grant: GatewayGrant.optional(),
  credentials: z.record(z.string(), z.string()),
  tokens: z.record(z.string(), z.string().startsWith(GATEWAY_TOKEN_PREFIX)),
  mcp: z.array(McpServerGrant).optional(),
  suspended: z.boolean().optional(),
});
const RoutesFile = z.object({ version: z.literal(1), routes: z.array(GatewayRouteRecord) });

/** A new gateway token: the prefix and 32 random bytes (base64url). */
export function newGatewayToken(): string {
  return GATEWAY_TOKEN_PREFIX + randomBytes(32).toString("base64url");
}

/**
 * Tokens are looked up by their SHA-256, never compared as strings: how long a lookup takes
 * tells nothing about how much of a guessed token was right.
 */
function tokenDigest(token: string): string {
  return createHash("sha256").update(token).digest("base64url");
}

export class GatewayRoutes {
  readonly #file: string | undefined;
  readonly #routes = new Map<string, GatewayRoute>();
  /** Token digest -> the route's key and the credential name the token stands for. */
  readonly #byToken = new Map<string, { key: string; credential: string }>();

  /**
   * @param options.file where the routes are kept (loaded now, saved on every change); absent:
   * memory only. A file that is there but not readable as routes throws (never silently empty:
   * the sessions it held would lose their model).
   */
  constructor(options: { file?: string } = {}) {
    this.#file = options.file;
    if (this.#file === undefined) return;
    let text: string;
    try {
      text = readFileSync(this.#file, "utf8");
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === "ENOENT") return;
      throw error;
    }
    const parsed = RoutesFile.safeParse(JSON.parse(text));
    if (!parsed.success)
      throw new Error(`${this.#file} is not a gateway routes file: ${parsed.error.message}`);
    for (const record of parsed.data.routes) this.#put({ ...record, grant: record.grant });
  }

  /**
   * The route of `key` with this grant and these values. Same key: keeps its tokens (a
   * re-provision must not change the workload's environment), takes the new grant and values; a
   * credential name added gets a token, one removed loses its token. New key: a token per
   * credential name.
   */
  ensure(
    key: string,
    grant: GatewayGrant | undefined,
    credentials: Record<string, string>,
    mcp: readonly McpServerGrant[] = [],
  ): GatewayRoute {
    const previous = this.#routes.get(key);
    const tokens: Record<string, string> = {};
    const names = Object.keys(credentials).filter((name) => name !== MCP_TOKEN_ENV);
    // The session's MCP token stands for no value: the model path swaps it for nothing.
    if (mcp.length > 0) names.push(MCP_TOKEN_ENV);
    for (const name of names) tokens[name] = previous?.tokens[name] ?? newGatewayToken();
    if (previous && !previous.suspended) this.#forgetTokens(previous);
    const { [MCP_TOKEN_ENV]: _none, ...values } = credentials;
    const route: GatewayRoute = {
      key,
      grant,
      credentials: values,
      tokens,
      ...(mcp.length > 0 ? { mcp: [...mcp] } : {}),
    };
    this.#put(route);
    this.#save();
    return route;
  }

  get(key: string): GatewayRoute | undefined {
    return this.#routes.get(key);
  }

  /**
   * The workload stopped: its tokens are refused from now on and the credential values forgotten,
   * the tokens kept for the next `ensure` of the key. Unknown keys are fine.
   */
  suspend(key: string): void {
    const route = this.#routes.get(key);
    if (!route || route.suspended) return;
    this.#forgetTokens(route);
    const { mcp: _forgotten, ...kept } = route;
    this.#routes.set(key, { ...kept, credentials: {}, suspended: true });
    this.#save();
  }

  /** Forgets the route: its tokens are refused from then on. Unknown keys are fine. */
  drop(key: string): void {
    const route = this.#routes.get(key);
    if (!route) return;
    this.#forgetTokens(route);
    this.#routes.delete(key);
    this.#save();
  }

  /** The route a token belongs to and the credential it stands for; undefined when unknown or dropped. */
  find(token: string): { route: GatewayRoute; credential: string } | undefined {
    if (!token.startsWith(GATEWAY_TOKEN_PREFIX)) return undefined;
    const hit = this.#byToken.get(tokenDigest(token));
    const route = hit && this.#routes.get(hit.key);
    return hit && route ? { route, credential: hit.credential } : undefined;
  }

  keys(): string[] {
    return [...this.#routes.keys()];
  }

  #put(route: GatewayRoute): void {
    this.#routes.set(route.key, route);
    if (route.suspended) return;
    for (const [credential, token] of Object.entries(route.tokens))
      this.#byToken.set(tokenDigest(token), { key: route.key, credential });
  }

  #forgetTokens(route: GatewayRoute): void {
    for (const token of Object.values(route.tokens)) this.#byToken.delete(tokenDigest(token));
  }

  /** Written whole (0600) to a temporary file, then renamed over the old one. A failure throws. */
  #save(): void {
    if (this.#file === undefined) return;
    const routes = [...this.#routes.values()]; // an absent grant (undefined) is left out
    writePrivateFile(this.#file, JSON.stringify({ version: 1, routes }));
  }
}
