/**
 * `serve` over PostgreSQL (AGENT_SESSIONS_DATABASE_URL): the whole server keeps its state in the
 * test bed's database, not in the data directory, and finds it again after a restart.
 */
import { existsSync } from "node:fs";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import type { Logger } from "../../proxy/observability/log.ts";
import { defaultHandler } from "../../proxy/testing/fake-runner.ts";
import { startTestServer, type TestServer } from "../../proxy/testing/test-server.ts";
import { freshDatabase } from "../support/store/store-backends.ts";

let database: { url: string; drop(): Promise<void> };
let t: TestServer | undefined;
const lines: string[] = [];
const log: Logger = (level, msg, fields) => {
  lines.push(JSON.stringify({ level, msg, ...fields }));
};
beforeEach(async () => {
  database = await freshDatabase();
});
afterEach(async () => {
  await t?.close();
  t = undefined;
  await database.drop();
});

describe("serve with AGENT_SESSIONS_DATABASE_URL", () => {
  it("keeps workspaces, sessions and idempotency keys in PostgreSQL across a restart, nothing in the data directory", async () => {
    t = await startTestServer({ databaseUrl: database.url }, { log });
    const runner = await t.runner({
      handler: async (command) => {
        await new Promise((r) => setTimeout(r, 100)); // retries arrive while the first one runs
        return defaultHandler(command);
      },
    });
    const provision = (server: TestServer) =>
      server.rpc("ProvisionAgentWorkspace", {
        agent_ref: "alice",
        workstream: "main",
        client_request_id: "req-1",
      });
    const replies = await Promise.all(Array.from({ length: 5 }, () => provision(t as TestServer)));
    expect(new Set(replies.map((r) => r.body.container_name)).size).toBe(1);
    expect(runner.commandsOf("provision")).toHaveLength(1);
    const container = replies[0]?.body.container_name;
    const started = await t.rpc("StartAgentSession", { container_name: container });
    expect(started.body).toMatchObject({ state: "READY" });

    await t.stop();
    t = await startTestServer({ dataDir: t.dataDir, databaseUrl: database.url }, { log, agent: false });
    expect(existsSync(join(t.dataDir, "agent-sessions.db"))).toBe(false);
    expect((await provision(t)).body).toEqual({ container_name: container, created: true });
    const status = await t.rpc("GetAgentStatus", { session_id: started.body.session_id });
    expect(status.body.sessions).toMatchObject([
      { session_id: started.body.session_id, container_name: container },
    ]);

    const listening = lines.filter((line) => line.includes('"server listening"'));
    expect(listening).toHaveLength(2);
    expect(listening[0]).toContain('"store":"postgresql postgres://');
    const password = new URL(database.url).password;
    if (password) for (const line of lines) expect(line).not.toContain(password);
  });

  it("refuses to start when the database cannot be reached, naming it without its password", async () => {
    const unreachable = new URL(database.url);
    unreachable.port = "1";
    unreachable.password = "not-the-password";
    await expect(startTestServer({ databaseUrl: unreachable.toString() }, { log })).rejects.toThrow(
      /cannot open the PostgreSQL store at postgres:\/\/[^ ]*:\*\*\*@127\.0\.0\.1:1\//,
    );
    await expect(startTestServer({ databaseUrl: unreachable.toString() }, { log })).rejects.not.toThrow(
      /not-the-password/,
    );
  });
});
