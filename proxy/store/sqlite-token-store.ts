import { optionalString, type Row, type SqliteDatabase, storeConnection } from "./sqlite-database.ts";
import { sessionUidsOf, type TokenRecord, type TokenStore } from "./token-store.ts";

/**
 * Migration 1 of the tokens table (issue 17): created when missing, so a database from a release
 * before scoped tokens gains it on first start and keeps everything else.
 */
const SCHEMA = `
CREATE TABLE IF NOT EXISTS api_tokens (
  id TEXT PRIMARY KEY, name TEXT NOT NULL UNIQUE, token_hash TEXT NOT NULL UNIQUE,
  scopes TEXT NOT NULL, created_at TEXT NOT NULL, expires_at TEXT, session_uids TEXT
);
`;

/** The embedded TokenStore: a table in the server's SQLite file. */
export class SqliteTokenStore implements TokenStore {
  readonly #db: SqliteDatabase;
  readonly #ownsDb: boolean;

  /** `database`: a path (a connection of its own) or the process's shared connection. */
  constructor(database: string | SqliteDatabase) {
    ({ db: this.#db, owned: this.#ownsDb } = storeConnection(database));
    this.#db.exec(SCHEMA);
    // Migration 2 (issue 34): chat tokens bound to their session's uid; older rows keep NULL.
    const columns = this.#db.all("PRAGMA table_info(api_tokens)").map((row) => String(row.name));
    if (!columns.includes("session_uids"))
      this.#db.exec("ALTER TABLE api_tokens ADD COLUMN session_uids TEXT");
  }

  async close(): Promise<void> {
    if (this.#ownsDb) this.#db.close();
  }

  async insertToken(token: TokenRecord): Promise<void> {
    this.#db.conflictAware(() =>
      this.#db.run(
        "INSERT INTO api_tokens (id, name, token_hash, scopes, created_at, expires_at, session_uids) VALUES (?, ?, ?, ?, ?, ?, ?)",
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
    const row = this.#db.get("SELECT * FROM api_tokens WHERE token_hash = ?", [tokenHash]);
    return row ? toRecord(row) : undefined;
  }

  async listTokens(): Promise<TokenRecord[]> {
    return this.#db.all("SELECT * FROM api_tokens ORDER BY name").map(toRecord);
  }

  async deleteToken(name: string): Promise<boolean> {
    return this.#db.run("DELETE FROM api_tokens WHERE name = ?", [name]) > 0;
  }
}

function toRecord(row: Row): TokenRecord {
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
