import { mkdtempSync, rmSync } from "node:fs";
import { DatabaseSync } from "node:sqlite";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { sqliteBackend } from "../../test/support/store/store-backends.ts";
import { describeStoreContract } from "../../test/support/store/store-contract.ts";
import { SqliteStore } from "./sqlite-store.ts";

describeStoreContract(sqliteBackend);

describe("SqliteStore migrations", () => {
  it("adds the drain flag to a runners table made before it existed, keeping its rows", async () => {
    const dir = mkdtempSync(join(tmpdir(), "agent-sessions-store-"));
    try {
      const path = join(dir, "db.sqlite");
      const old = new DatabaseSync(path);
      old.exec(`CREATE TABLE runners (
        runner_id TEXT PRIMARY KEY, runner_name TEXT NOT NULL UNIQUE, engine TEXT NOT NULL,
        capacity INTEGER NOT NULL, labels TEXT NOT NULL, last_seen_at TEXT NOT NULL);
        INSERT INTO runners VALUES ('runner-old', 'old', 'docker', 2, '{"zone":"a"}', '2026-01-01T00:00:00.000Z');`);
      old.close();
      const migrated = new SqliteStore(path);
      expect(await migrated.findRunner("old")).toMatchObject({
        runner_id: "runner-old",
        labels: { zone: "a" },
        draining: false,
      });
      expect(await migrated.setRunnerDraining("runner-old", true)).toMatchObject({ draining: true });
      await migrated.close();
      const reopened = new SqliteStore(path);
      expect(await reopened.findRunner("old")).toMatchObject({ draining: true });
      await reopened.close();
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("adds the seeded commit to a workspaces table made before it existed: old rows have none (their diff is refused), new ones keep theirs", async () => {
    const dir = mkdtempSync(join(tmpdir(), "agent-sessions-store-"));
    try {
      const path = join(dir, "db.sqlite");
      const old = new DatabaseSync(path);
      old.exec(`CREATE TABLE workspaces (
        container_name TEXT PRIMARY KEY, agent_ref TEXT NOT NULL, workstream TEXT NOT NULL,
        client_request_id TEXT NOT NULL UNIQUE, runner_id TEXT NOT NULL, status TEXT NOT NULL,
        endpoint TEXT, spec TEXT NOT NULL, adapter_token TEXT NOT NULL,
        created_at TEXT NOT NULL, updated_at TEXT NOT NULL, UNIQUE (agent_ref, workstream));
        INSERT INTO workspaces VALUES ('as-old', 'default/a', 'repo', 'k', 'r1', 'ready', NULL, '{}', 't',
          '2026-01-01T00:00:00.000Z', '2026-01-01T00:00:00.000Z');`);
      old.close();
      const migrated = new SqliteStore(path);
      expect(await migrated.getWorkspace("as-old")).toMatchObject({
        status: "ready",
        seeded_commit: undefined,
      });
      const commit = "f".repeat(40);
      expect(await migrated.updateWorkspace("as-old", { seeded_commit: commit })).toMatchObject({
        seeded_commit: commit,
      });
      await migrated.close();
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
