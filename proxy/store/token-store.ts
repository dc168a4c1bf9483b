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
  /**
   * Each `session:<ns>/<name>:chat` scope's HarnessSession `metadata.uid` at issue time (keyed by
   * the scope string): the token is that session's, not one re-created under its name later.
   * Absent for tokens issued before the binding (they stay bound by name only).
   */
  session_uids?: Record<string, string> | undefined;
};

/** The `session_uids` column (JSON), spread into a record only when set. */
export function sessionUidsOf(text: string | undefined): { session_uids?: Record<string, string> } {
  return text === undefined ? {} : { session_uids: JSON.parse(text) as Record<string, string> };
}
