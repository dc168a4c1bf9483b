import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { SqliteStore } from "./sqlite-store.ts";
import { SqliteTokenStore } from "./sqlite-token-store.ts";
import { sqliteBackend } from "../../test/support/store/store-backends.ts";
import { describeTokenStoreContract } from "../../test/support/store/token-store-contract.ts";
import type { TokenRecord } from "./token-store.ts";

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

const record = (over: Partial<TokenRecord> = {}): TokenRecord => ({
  id: "id-1",
  name: "portal",
  token_hash: "a".repeat(64),
  scopes: ["namespace:team-a:view"],
  created_at: "2026-12-01T00:00:00.000Z",
  expires_at: undefined,
  ...over,
});

describeTokenStoreContract(sqliteBackend);

describe("SqliteTokenStore migrations", () => {
  it("adds its table to a database from a release before tokens, keeping what was there", async () => {
    const dir = mkdtempSync(join(tmpdir(), "token-store-"));
    dirs.push(dir);
    const path = join(dir, "agent-sessions.db");
    const old = new SqliteStore(path);
    await old.registerRunner({ runner_name: "r", engine: "docker", capacity: 1, labels: {} });
    await old.close();

    const tokens = new SqliteTokenStore(path);
    await tokens.insertToken(record());
    await tokens.close();
    const reopened = new SqliteTokenStore(path);
    expect((await reopened.listTokens()).map((t) => t.id)).toEqual(["id-1"]);
    await reopened.close();
    const store = new SqliteStore(path);
    expect(await store.findRunner("r")).toMatchObject({ runner_name: "r" });
    await store.close();
  });
});
