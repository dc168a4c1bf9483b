/**
 * Scoped API tokens (contracts/access.ts), kept as a SHA-256 hash only: the secret is shown once
 * at creation and cannot be read back. Async like Store, so a PostgreSQL implementation can
 * replace the embedded one.
 */
export interface TokenStore {
  /** Throws `StoreConflictError` when the name is taken. */
  insertToken(token: TokenRecord): Promise<void>;
  /** The token whose hash this is (expired ones too: the caller tells them apart). */
  findTokenByHash(tokenHash: string): Promise<TokenRecord | undefined>;
  listTokens(): Promise<TokenRecord[]>;
  /** Revoke: the token is forgotten and stops working at once; false when there was none. */
  deleteToken(name: string): Promise<boolean>;
}

export type TokenRecord = {
  id: string;
  name: string;
  /** Hex SHA-256 of the token text. */
  token_hash: string;
  scopes: string[];
  created_at: string;
  /** ISO time after which the token is refused; undefined: it never expires. */
  expires_at: string | undefined;
};
