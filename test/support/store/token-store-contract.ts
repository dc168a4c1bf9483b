/**
 * The TokenStore contract (proxy/store/token-store.ts), one suite every implementation passes:
 * SQLite in the unit tier (proxy/store/sqlite-token-store.test.ts), PostgreSQL in the engine tier
 * (test/engine/postgres-token-store.test.ts).
 */
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { StoreConflictError } from "../../../proxy/store/store.ts";
import type { TokenRecord } from "../../../proxy/store/token-store.ts";
import type { StoreBackend, TestDatabase } from "./store-backends.ts";

const record = (over: Partial<TokenRecord> = {}): TokenRecord => ({
  id: "id-1",
  name: "portal",
  token_hash: "a".repeat(64),
  scopes: ["namespace:team-a:view"],
  created_at: "2026-12-01T00:00:00.000Z",
  expires_at: undefined,
  ...over,
});

export function describeTokenStoreContract(backend: StoreBackend): void {
  let db: TestDatabase;
  beforeEach(async () => {
    db = await backend.create();
  });
  afterEach(async () => {
    await db.drop();
  });

  describe(`${backend.name} TokenStore`, () => {
    it("finds a token by its hash, lists without change and forgets it on delete", async () => {
      const store = await db.openTokenStore();
      await store.insertToken(record({ expires_at: "2026-12-01T01:00:00.000Z" }));
      expect(await store.findTokenByHash("a".repeat(64))).toEqual(
        record({ expires_at: "2026-12-01T01:00:00.000Z" }),
      );
      expect(await store.findTokenByHash("b".repeat(64))).toBeUndefined();
      expect((await store.listTokens()).map((t) => t.name)).toEqual(["portal"]);
      expect(await store.deleteToken("portal")).toBe(true);
      expect(await store.deleteToken("portal")).toBe(false);
      expect(await store.findTokenByHash("a".repeat(64))).toBeUndefined();
    });

    it("refuses a second token of one name or one hash", async () => {
      const store = await db.openTokenStore();
      await store.insertToken(record());
      await expect(store.insertToken(record({ id: "id-2", token_hash: "c".repeat(64) }))).rejects.toThrow(
        StoreConflictError,
      );
      await expect(store.insertToken(record({ id: "id-3", name: "other" }))).rejects.toThrow(
        StoreConflictError,
      );
    });

    it("keeps tokens beside the other stores' tables, across a reopen", async () => {
      const store = await db.openStore();
      await store.registerRunner({ runner_name: "r", engine: "docker", capacity: 1, labels: {} });
      await (await db.openTokenStore()).insertToken(record());
      expect((await (await db.openTokenStore()).listTokens()).map((t) => t.id)).toEqual(["id-1"]);
      expect(await (await db.openStore()).findRunner("r")).toMatchObject({ runner_name: "r" });
    });

    it("lists tokens by name in byte order", async () => {
      const store = await db.openTokenStore();
      for (const [i, name] of ["b", "B", "a-1", "a"].entries())
        await store.insertToken(record({ id: `id-${i}`, name, token_hash: String(i).repeat(64) }));
      expect((await store.listTokens()).map((t) => t.name)).toEqual(["B", "a", "a-1", "b"]);
    });
  });
}
