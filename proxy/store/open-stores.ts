import type { HarnessStore } from "./harness-store.ts";
import { PostgresDatabase } from "./postgres-database.ts";
import { PostgresHarnessStore } from "./postgres-harness-store.ts";
import { PostgresStore } from "./postgres-store.ts";
import { PostgresTokenStore } from "./postgres-token-store.ts";
import { redactDatabaseUrl } from "./database-url.ts";
import { SqliteDatabase } from "./sqlite-database.ts";
import { SqliteHarnessStore } from "./sqlite-harness-store.ts";
import { SqliteStore } from "./sqlite-store.ts";
import { SqliteTokenStore } from "./sqlite-token-store.ts";
import type { Store } from "./store.ts";
import type { TokenStore } from "./token-store.ts";

export type StoreSelection = {
  /** The embedded default's file (`<data-dir>/agent-sessions.db`). */
  sqlitePath: string;
  /** AGENT_SESSIONS_DATABASE_URL: PostgreSQL instead of SQLite when set. */
  databaseUrl?: string | undefined;
  frameBufferSize: number;
  /** A pooled PostgreSQL connection failed while idle (it is replaced on the next query). */
  onDatabaseError?: (error: Error) => void;
};

/** The server's three stores over one connection (SQLite) or one pool (PostgreSQL). */
export type ServerStores = {
  backend: "sqlite" | "postgresql";
  /** Where the data is, fit for a log line (no password). */
  location: string;
  store: Store;
  harnessStore: HarnessStore;
  tokenStore: TokenStore;
  /** The PostgreSQL pool the stores share (what the replicas share besides them), if that is the backend. */
  postgres?: PostgresDatabase;
  /** Close the stores, then their connection. */
  close(): Promise<void>;
};

/**
 * Open the server's stores: PostgreSQL only when a connection string is given (migrated before
 * anything reads it), else the embedded SQLite file.
 */
export async function openStores(selection: StoreSelection): Promise<ServerStores> {
  if (selection.databaseUrl !== undefined) {
    const location = redactDatabaseUrl(selection.databaseUrl);
    let database: PostgresDatabase;
    try {
      database = await PostgresDatabase.open(selection.databaseUrl, {
        ...(selection.onDatabaseError ? { onIdleError: selection.onDatabaseError } : {}),
      });
    } catch (error) {
      // pg's messages name the host or the role, never the password; the URL is given redacted.
      throw new Error(`cannot open the PostgreSQL store at ${location}: ${(error as Error).message}`);
    }
    const store = new PostgresStore(database, { frameBufferSize: selection.frameBufferSize });
    const harnessStore = new PostgresHarnessStore(database);
    return {
      backend: "postgresql",
      location,
      store,
      harnessStore,
      tokenStore: new PostgresTokenStore(database),
      postgres: database,
      close: async () => {
        await store.close();
        await harnessStore.close();
        await database.close();
      },
    };
  }
  const database = new SqliteDatabase(selection.sqlitePath);
  const store = new SqliteStore(database, { frameBufferSize: selection.frameBufferSize });
  const harnessStore = new SqliteHarnessStore(database);
  return {
    backend: "sqlite",
    location: selection.sqlitePath,
    store,
    harnessStore,
    tokenStore: new SqliteTokenStore(database),
    close: async () => {
      await store.close();
      await harnessStore.close();
      database.close();
    },
  };
}
