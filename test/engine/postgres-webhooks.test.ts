/**
 * Webhooks (issue 40) over PostgreSQL (AGENT_SESSIONS_DATABASE_URL): a Webhook is a row of the
 * database's resources table like in SQLite, its secret kept across a server restart and never
 * answered, and deliveries signed with it verify.
 */
import { createServer, type IncomingHttpHeaders, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { Webhook as Verifier } from "standardwebhooks";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { startTestServer, type TestServer } from "../../proxy/testing/test-server.ts";
import { freshDatabase } from "../support/store/store-backends.ts";
import { until } from "../support/until.ts";

const SECRET = `whsec_${Buffer.from("postgres-webhook-secret-0123456789").toString("base64")}`;
const HOOKS = "/v1/namespaces/default/webhooks";

let database: { url: string; drop(): Promise<void> };
let t: TestServer | undefined;
let receiver: Server;
const got: { headers: IncomingHttpHeaders; body: string }[] = [];

beforeEach(async () => {
  database = await freshDatabase();
  receiver = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      got.push({ headers: req.headers, body: Buffer.concat(chunks).toString() });
      res.writeHead(204).end();
    });
  });
  await new Promise<void>((resolve) => receiver.listen(0, "127.0.0.1", resolve));
});
afterEach(async () => {
  await t?.close();
  t = undefined;
  receiver.close();
  await database.drop();
});

describe("Webhooks over PostgreSQL", () => {
  it("keep their secret across a restart, never answer it, and sign deliveries with it", async () => {
    const settings = { egressAllow: ["127.0.0.1/32"], attemptsMax: 3, retryBaseMs: 50, timeoutMs: 2_000 };
    t = await startTestServer({ databaseUrl: database.url, webhooks: settings });
    const url = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hook`;
    const manifest = {
      apiVersion: "agent-sessions.dev/v1alpha1",
      kind: "Webhook",
      metadata: { name: "pg" },
      spec: { url, events: ["created"], secret: SECRET },
    };
    expect((await t.call("PUT", `${HOOKS}/pg`, manifest)).status).toBe(201);
    await t.stop();
    t = await startTestServer(
      { dataDir: t.dataDir, databaseUrl: database.url, webhooks: settings },
      { agent: false },
    );
    const read = await t.call("GET", `${HOOKS}/pg`);
    expect(read.status).toBe(200);
    expect(JSON.stringify(read.body)).not.toContain("whsec_");
    // Written back as read (no secret): the stored one is kept.
    expect((await t.call("PUT", `${HOOKS}/pg`, read.body)).status).toBe(200);
    await t.runner();
    const put = await t.call("PUT", "/v1/namespaces/default/harnesssessions/pg-session", {
      apiVersion: "agent-sessions.dev/v1alpha1",
      kind: "HarnessSession",
      metadata: { name: "pg-session" },
      spec: { agentRef: "alice", runtimeRef: "reference" },
    });
    expect(put.status, JSON.stringify(put.body)).toBe(201);
    const delivery = await until("a delivery", () => got[0]);
    expect(
      new Verifier(SECRET).verify(delivery.body, delivery.headers as Record<string, string>),
    ).toMatchObject({
      type: "created",
      data: { session: { namespace: "default", name: "pg-session" }, reason: "Created" },
    });
  }, 60_000);
});
