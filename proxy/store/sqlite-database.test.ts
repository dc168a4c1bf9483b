import { setImmediate as nextTurn } from "node:timers/promises";
import { describe, expect, it } from "vitest";
import { SqliteDatabase } from "./sqlite-database.ts";

function database(): SqliteDatabase {
  const db = new SqliteDatabase(":memory:");
  db.exec("CREATE TABLE t (k TEXT PRIMARY KEY, v INTEGER NOT NULL)");
  return db;
}

describe("batched writes (group commit)", () => {
  it("commits the writes of one turn together, each answered with its own value", async () => {
    const db = database();
    let transactions = 0;
    const transaction = db.transaction.bind(db);
    db.transaction = <T>(fn: () => T): T => {
      transactions += 1;
      return transaction(fn);
    };
    const writes = ["a", "b", "c"].map((k, i) =>
      db.batched(() => db.run("INSERT INTO t VALUES (?, ?)", [k, i])),
    );
    // Nothing is written within the caller's turn.
    expect(db.get("SELECT count(*) AS n FROM t")?.n).toBe(0);
    expect(await Promise.all(writes)).toEqual([1, 1, 1]);
    expect(transactions).toBe(1);
    expect(db.all("SELECT k FROM t ORDER BY k").map((r) => r.k)).toEqual(["a", "b", "c"]);
  });

  it("rolls back only the write that threw, which alone rejects", async () => {
    const db = database();
    const first = db.batched(() => db.run("INSERT INTO t VALUES ('a', 1)"));
    const failing = db.batched(() => {
      db.run("UPDATE t SET v = 99 WHERE k = 'a'");
      db.run("INSERT INTO t VALUES ('a', 2)"); // the primary key: throws
    });
    const last = db.batched(() => db.run("INSERT INTO t VALUES ('b', 3)"));
    await expect(failing).rejects.toThrow(/UNIQUE/);
    expect(await first).toBe(1);
    expect(await last).toBe(1);
    expect(db.all("SELECT k, v FROM t ORDER BY k")).toEqual([
      { k: "a", v: 1 },
      { k: "b", v: 3 },
    ]);
  });

  it("makes the writes asked for before the connection closes", async () => {
    const db = new SqliteDatabase(":memory:");
    db.exec("CREATE TABLE t (k TEXT PRIMARY KEY, v INTEGER NOT NULL)");
    const write = db.batched(() => db.run("INSERT INTO t VALUES ('a', 1)"));
    db.close();
    expect(await write).toBe(1);
    await nextTurn();
  });
});
