import { createHash, randomBytes, randomUUID } from "node:crypto";
import {
  API_TOKEN_PREFIX,
  ApiTokenText,
  type CreatedToken,
  CreateTokenRequest,
  DEFAULT_SESSION_TOKEN_TTL,
  type ParsedScope,
  parseScope,
  type TokenInfo,
} from "../../contracts/access.ts";
import { parseDuration } from "../../contracts/duration.ts";
import { CodedError } from "../../contracts/errors.ts";
import { HARNESS_SESSION_KIND } from "../../contracts/harness-session.ts";
import { parseInput } from "../lifecycle/request-body.ts";
import { bearerToken, sameToken } from "../runners/bearer.ts";
import { StoreConflictError } from "../store/store.ts";
import type { TokenRecord, TokenStore } from "../store/token-store.ts";

/** Who is calling: the admin token or one API token, with what its scopes grant. */
export type Principal = {
  /** `admin` for the admin token, else the token's id (audit lines carry it, never the token). */
  id: string;
  name: string;
  scopes: ParsedScope[];
  /** When the token stops working (ISO 8601); absent: never (the admin token, a token without ttl). */
  expiresAt?: string | undefined;
};

export const ADMIN_PRINCIPAL: Principal = { id: "admin", name: "admin", scopes: [{ kind: "admin" }] };

export type Authentication =
  | { ok: true; principal: Principal }
  | { ok: false; caller: "anonymous" | "unknown" | "runner" };

export type ApiTokensOptions = {
  adminToken: string;
  runnerToken: string;
  /** Absent: only the admin token is accepted (RPC-only setups and older tests). */
  store?: TokenStore | undefined;
  /**
   * A HarnessSession's `metadata.uid`, undefined when it does not exist: a chat token is bound
   * to it at issue time. Absent (RPC-only setups): chat tokens are bound by name only.
   */
  sessionUid?: ((namespace: string, name: string) => Promise<string | undefined>) | undefined;
  /** @default () => new Date() */
  now?: () => Date;
};

/**
 * Creates, lists and revokes scoped API tokens and tells who a bearer token is. A token's secret
 * is 32 random bytes shown once; the store keeps its SHA-256 (a fast hash is right for 256 bits of
 * entropy: there is nothing to brute-force). Expired and revoked tokens are as unknown as a made-up
 * one: the caller learns nothing about which tokens exist.
 */
export class ApiTokens {
  readonly #options: ApiTokensOptions;
  readonly #now: () => Date;
  readonly #revoked = new Set<() => void>();

  constructor(options: ApiTokensOptions) {
    this.#options = options;
    this.#now = options.now ?? (() => new Date());
  }

  async authenticate(header: string | undefined | null): Promise<Authentication> {
    const token = bearerToken(header);
    if (token === undefined) return { ok: false, caller: "anonymous" };
    if (sameToken(token, this.#options.adminToken)) return { ok: true, principal: ADMIN_PRINCIPAL };
    if (sameToken(token, this.#options.runnerToken)) return { ok: false, caller: "runner" };
    const store = this.#options.store;
    if (!store || !ApiTokenText.safeParse(token).success) return { ok: false, caller: "unknown" };
    const record = await store.findTokenByHash(hashToken(token));
    if (!record || isExpired(record, this.#now())) return { ok: false, caller: "unknown" };
    const scopes = record.scopes.flatMap((s): ParsedScope[] => {
      const parsed = parseScope(s);
      if (!parsed) return [];
      const uid = record.session_uids?.[s];
      return [
        (parsed.kind === "session" || parsed.kind === "port") && uid !== undefined
          ? { ...parsed, uid }
          : parsed,
      ];
    });
    return {
      ok: true,
      principal: {
        id: record.id,
        name: record.name,
        scopes,
        ...(record.expires_at !== undefined ? { expiresAt: record.expires_at } : {}),
      },
    };
  }

  async create(body: unknown): Promise<CreatedToken> {
    const store = this.#tokenStore();
    const request = parseInput(CreateTokenRequest, body, "token request");
    const sessionOnly = request.scopes.every((s) => {
      const kind = parseScope(s)?.kind;
      return kind === "session" || kind === "port";
    });
    const ttl = request.ttl ?? (sessionOnly ? DEFAULT_SESSION_TOKEN_TTL : undefined);
    const sessionUids = await this.#bindSessions(request.scopes);
    const now = this.#now();
    const token = `${API_TOKEN_PREFIX}${randomBytes(32).toString("base64url")}`;
    const record: TokenRecord = {
      id: randomUUID(),
      name: request.name,
      token_hash: hashToken(token),
      scopes: request.scopes,
      created_at: now.toISOString(),
      expires_at:
        ttl === undefined ? undefined : new Date(now.getTime() + (parseDuration(ttl) ?? 0)).toISOString(),
      ...(sessionUids !== undefined ? { session_uids: sessionUids } : {}),
    };
    try {
      await store.insertToken(record);
    } catch (error) {
      if (error instanceof StoreConflictError)
        throw new CodedError(
          "ALREADY_EXISTS",
          `a token named ${request.name} exists; revoke it first (DELETE /v1/tokens/${request.name})`,
        );
      throw error;
    }
    return { ...info(record), token };
  }

  async list(): Promise<TokenInfo[]> {
    return (await this.#tokenStore().listTokens()).map(info);
  }

  async revoke(name: string): Promise<void> {
    if (!(await this.#tokenStore().deleteToken(name)))
      throw new CodedError("NOT_FOUND", `token ${name} not found`);
    for (const listener of this.#revoked) listener();
  }

  /**
   * Told after each revocation in this process (an open event stream checks its token again at
   * once, instead of at its next periodic check). Returns the unsubscribe.
   */
  onRevoked(listener: () => void): () => void {
    this.#revoked.add(listener);
    return () => this.#revoked.delete(listener);
  }

  /**
   * Each chat or port scope's session uid now. A session that does not exist is NOT_FOUND: a token
   * for it could not be bound, and would open whatever session is later created under that name.
   */
  async #bindSessions(scopes: readonly string[]): Promise<Record<string, string> | undefined> {
    const lookup = this.#options.sessionUid;
    if (!lookup) return undefined;
    const uids: Record<string, string> = {};
    for (const text of scopes) {
      const scope = parseScope(text);
      if (scope?.kind !== "session" && scope?.kind !== "port") continue;
      const uid = await lookup(scope.namespace, scope.name);
      if (uid === undefined)
        throw new CodedError(
          "NOT_FOUND",
          `${HARNESS_SESSION_KIND} ${scope.namespace}/${scope.name} not found: a ${scope.kind === "port" ? "port" : "chat"} token is bound to the session it is issued for, so create the session first`,
        );
      uids[text] = uid;
    }
    return Object.keys(uids).length > 0 ? uids : undefined;
  }

  #tokenStore(): TokenStore {
    const store = this.#options.store;
    if (!store) throw new CodedError("UNIMPLEMENTED", "this server keeps no API tokens");
    return store;
  }
}

export function hashToken(token: string): string {
  return createHash("sha256").update(token).digest("hex");
}

function isExpired(record: TokenRecord, now: Date): boolean {
  return record.expires_at !== undefined && Date.parse(record.expires_at) <= now.getTime();
}

function info(record: TokenRecord): TokenInfo {
  return {
    name: record.name,
    id: record.id,
    scopes: record.scopes,
    createdAt: record.created_at,
    ...(record.expires_at !== undefined ? { expiresAt: record.expires_at } : {}),
  };
}
