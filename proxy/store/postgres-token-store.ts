import type { PostgresDatabase } from "./postgres-database.ts";
import { optionalString, type StoredRow } from "./store-rows.ts";
import { sessionUidsOf, type TokenRecord, type TokenStore } from "./token-store.ts";

/** The TokenStore on PostgreSQL: the `api_tokens` table (postgres-migrations.ts). */
export class PostgresTokenStore implements TokenStore {
  readonly #db: PostgresDatabase;

  /** `database` is the process's pool (migrated by `PostgresDatabase.open`); its owner closes it. */
  constructor(database: PostgresDatabase) {
    this.#db = database;
  }

  async insertToken(token: TokenRecord): Promise<void> {
    await this.#db.conflictAware(() =>
      this.#db.run(
        "INSERT INTO api_tokens (id, name, token_hash, scopes, created_at, expires_at, session_uids) VALUES ($1, $2, $3, $4, $5, $6, $7)",
        [
          token.id,
          token.name,
          token.token_hash,
          JSON.stringify(token.scopes),
          token.created_at,
          token.expires_at ?? null,
          token.session_uids === undefined ? null : JSON.stringify(token.session_uids),
        ],
      ),
    );
  }

  async findTokenByHash(tokenHash: string): Promise<TokenRecord | undefined> {
    const row = await this.#db.get("SELECT * FROM api_tokens WHERE token_hash = $1", [tokenHash]);
    return row ? toToken(row) : undefined;
  }

  async listTokens(): Promise<TokenRecord[]> {
    return (await this.#db.all("SELECT * FROM api_tokens ORDER BY name")).map(toToken);
  }

  async deleteToken(name: string): Promise<boolean> {
    return (await this.#db.run("DELETE FROM api_tokens WHERE name = $1", [name])) > 0;
  }
}

function toToken(row: StoredRow): TokenRecord {
  return {
    id: String(row.id),
    name: String(row.name),
    token_hash: String(row.token_hash),
    scopes: JSON.parse(String(row.scopes)) as string[],
    created_at: String(row.created_at),
    expires_at: optionalString(row.expires_at),
    ...sessionUidsOf(optionalString(row.session_uids)),
  };
}
