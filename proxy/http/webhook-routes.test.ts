/**
 * Webhooks (issue 40) through the server's API, against a fake runner and a loopback receiver the
 * operator setting allows: the secret is shown once and never read back, bad input is a 400 that
 * stores nothing, scopes decide who may do what, and a session's lifecycle reaches the receiver
 * signed (verified with the Standard Webhooks library), in order, with its reasons, retried after
 * a 500, recorded in `…/deliveries`.
 */
import { createServer, type IncomingHttpHeaders, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { Webhook as Verifier } from "standardwebhooks";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { until } from "../../test/support/until.ts";
import { WEBHOOKS_PER_NAMESPACE_MAX } from "../../contracts/webhook.ts";
import { defaultHandler } from "../testing/fake-runner.ts";
import type { Logger } from "../observability/log.ts";
import { startTestServer, type TestServer } from "../testing/test-server.ts";

// biome-ignore lint/suspicious/noExplicitAny: JSON bodies of many shapes, read by assertions
type Json = any;

const HOOKS = "/v1/namespaces/default/webhooks";
const SESSIONS = "/v1/namespaces/default/harnesssessions";
const SECRET = `whsec_${Buffer.from("0123456789abcdef0123456789abcdef").toString("base64")}`;

type Received = { headers: IncomingHttpHeaders; body: string };

/** A loopback receiver answering `statuses` in turn (then 204). */
async function receiver(statuses: number[] = []): Promise<{ url: string; got: Received[]; server: Server }> {
  const got: Received[] = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      got.push({ headers: req.headers, body: Buffer.concat(chunks).toString() });
      res.writeHead(statuses.shift() ?? 204).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`, got, server };
}

const hook = (name: string, spec: Record<string, unknown>) => ({
  apiVersion: "agent-sessions.dev/v1alpha1",
  kind: "Webhook",
  metadata: { name },
  spec,
});

let t: TestServer;
const servers: Server[] = [];
const logLines: string[] = [];
const log: Logger = (level, msg, fields) => {
  logLines.push(JSON.stringify({ level, msg, ...fields }));
};
beforeEach(async () => {
  logLines.length = 0;
  t = await startTestServer(
    { webhooks: { egressAllow: ["127.0.0.1/32"], attemptsMax: 4, retryBaseMs: 50, timeoutMs: 2_000 } },
    { log },
  );
});
afterEach(async () => {
  await t.close();
  for (const s of servers.splice(0)) s.close();
});

async function token(name: string, scopes: string[]): Promise<string> {
  const minted = await t.call("POST", "/v1/tokens", { name, scopes });
  expect(minted.status, JSON.stringify(minted.body)).toBe(201);
  return minted.body.token as string;
}

describe("Webhook resources", () => {
  it("shows a generated secret once, in the create answer; GET, list and replace never show it", async () => {
    const created = await t.call(
      "PUT",
      `${HOOKS}/portal`,
      hook("portal", { url: "https://93.184.215.14/hooks", events: ["ready"] }),
    );
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    expect(created.body.spec.secret).toMatch(/^whsec_[A-Za-z0-9+/]{43}=$/);
    const read = await t.call("GET", `${HOOKS}/portal`);
    expect(read.status).toBe(200);
    expect(read.body.spec).toEqual({ url: "https://93.184.215.14/hooks", events: ["ready"] });
    const list = await t.call("GET", HOOKS);
    expect(list.body).toMatchObject({ kind: "WebhookList", items: [{ metadata: { name: "portal" } }] });
    expect(JSON.stringify(list.body)).not.toContain("whsec_");
    const replaced = await t.call("PUT", `${HOOKS}/portal`, read.body);
    expect(replaced.status).toBe(200);
    expect(JSON.stringify(replaced.body)).not.toContain("whsec_");
    const given = await t.call(
      "PUT",
      `${HOOKS}/given`,
      hook("given", { url: "https://93.184.215.14/hooks", events: ["ready"], secret: SECRET }),
    );
    expect(given.status).toBe(201);
    expect(JSON.stringify(given.body)).not.toContain("whsec_");
    expect((await t.call("DELETE", `${HOOKS}/given`)).status).toBe(200);
    expect((await t.call("GET", `${HOOKS}/given`)).status).toBe(404);
  });

  it("refuses a receiver at a refused address, an unknown event and a malformed secret with a 400, storing nothing", async () => {
    const cases: [Record<string, unknown>, string][] = [
      [{ url: "http://169.254.169.254/latest", events: ["ready"] }, "spec.url"],
      [{ url: "http://127.0.0.2:9/hook", events: ["ready"] }, "spec.url"],
      [{ url: "http://[::1]:9/hook", events: ["ready"] }, "spec.url"],
      [{ url: "ftp://93.184.215.14/hook", events: ["ready"] }, "spec.url"],
      [{ url: "https://93.184.215.14/hook", events: ["readyy"] }, "spec.events"],
      [{ url: "https://93.184.215.14/hook", events: [] }, "spec.events"],
      [{ url: "https://93.184.215.14/hook", events: ["ready"], secret: "hunter2" }, "spec.secret"],
      [{ url: "https://93.184.215.14/hook", events: ["ready"], secret: "whsec_c2hvcnQ=" }, "spec.secret"],
    ];
    for (const [spec, field] of cases) {
      const answer = await t.call("PUT", `${HOOKS}/bad`, hook("bad", spec));
      expect(answer.status, JSON.stringify(spec)).toBe(400);
      expect(answer.body.code).toBe("INVALID_ARGUMENT");
      expect(JSON.stringify(answer.body.details.field_violations)).toContain(field);
      expect(JSON.stringify(answer.body)).not.toContain("hunter2");
    }
    expect((await t.call("GET", `${HOOKS}/bad`)).status).toBe(404);
    // A namespace holds at most WEBHOOKS_PER_NAMESPACE_MAX: one more is 429, replacing one is fine.
    for (let i = 0; i < WEBHOOKS_PER_NAMESPACE_MAX; i++)
      expect(
        (
          await t.call(
            "PUT",
            `${HOOKS}/h${i}`,
            hook(`h${i}`, { url: "https://93.184.215.14/", events: ["ready"] }),
          )
        ).status,
      ).toBe(201);
    const over = await t.call(
      "PUT",
      `${HOOKS}/one-more`,
      hook("one-more", { url: "https://93.184.215.14/", events: ["ready"] }),
    );
    expect(over.status).toBe(429);
    expect(over.body.code).toBe("RESOURCE_EXHAUSTED");
    expect((await t.call("GET", `${HOOKS}/one-more`)).status).toBe(404);
    expect(
      (await t.call("PUT", `${HOOKS}/h0`, hook("h0", { url: "https://93.184.215.14/", events: ["failed"] })))
        .status,
    ).toBe(200);
    const metadata = await t.call("GET", `${HOOKS}/bad/deliveries`);
    expect(metadata.status).toBe(404);
  });

  it("needs the namespace's edit to write, its view to read; a chat token can do nothing with them", async () => {
    const { url, server } = await receiver();
    servers.push(server);
    expect((await t.call("PUT", `${HOOKS}/h`, hook("h", { url, events: ["ready"] }))).status).toBe(201);
    const viewer = await token("viewer", ["namespace:default:view"]);
    const editor = await token("editor", ["namespace:default:edit"]);
    const other = await token("other", ["namespace:other:edit"]);
    expect((await t.call("GET", HOOKS, undefined, viewer)).status).toBe(200);
    expect((await t.call("GET", `${HOOKS}/h`, undefined, viewer)).status).toBe(200);
    expect((await t.call("GET", `${HOOKS}/h/deliveries`, undefined, viewer)).status).toBe(200);
    expect((await t.call("PUT", `${HOOKS}/v`, hook("v", { url, events: ["ready"] }), viewer)).status).toBe(
      403,
    );
    expect((await t.call("DELETE", `${HOOKS}/h`, undefined, viewer)).status).toBe(403);
    expect((await t.call("GET", HOOKS, undefined, other)).status).toBe(403);
    expect((await t.call("PUT", `${HOOKS}/e`, hook("e", { url, events: ["ready"] }), editor)).status).toBe(
      201,
    );
    expect((await t.call("DELETE", `${HOOKS}/e`, undefined, editor)).status).toBe(200);
    await t.runner();
    expect(
      (
        await t.call("PUT", `${SESSIONS}/chatty`, {
          apiVersion: "agent-sessions.dev/v1alpha1",
          kind: "HarnessSession",
          metadata: { name: "chatty" },
          spec: { agentRef: "alice", runtimeRef: "reference" },
        })
      ).status,
    ).toBe(201);
    const chat = await token("chat", ["session:default/chatty:chat"]);
    for (const [method, path, body] of [
      ["GET", HOOKS],
      ["GET", `${HOOKS}/h`],
      ["GET", `${HOOKS}/h/deliveries`],
      ["PUT", `${HOOKS}/c`, hook("c", { url, events: ["ready"] })],
      ["DELETE", `${HOOKS}/h`],
    ] as const)
      expect((await t.call(method, path, body, chat)).status, `${method} ${path}`).toBe(403);
  });
});

describe("Webhook delivery", () => {
  it("tells the receiver created → ready → stopped → deleted, signed, in order, with reasons; retries a 500", async () => {
    const r = await receiver([500, 500]);
    servers.push(r.server);
    const created = await t.call(
      "PUT",
      `${HOOKS}/life`,
      hook("life", { url: r.url, events: ["created", "ready", "stopped", "deleted"] }),
    );
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    const secret = created.body.spec.secret as string;
    await t.runner();
    const manifest = (desiredState: string) => ({
      apiVersion: "agent-sessions.dev/v1alpha1",
      kind: "HarnessSession",
      metadata: { name: "s" },
      spec: { agentRef: "alice", runtimeRef: "reference", desiredState },
    });
    expect((await t.call("PUT", `${SESSIONS}/s`, manifest("running"))).status).toBe(201);
    await until("s Ready", async () =>
      (await t.call("GET", `${SESSIONS}/s`)).body.status?.phase === "Ready" ? true : undefined,
    );
    expect((await t.call("PUT", `${SESSIONS}/s`, manifest("stopped"))).status).toBe(200);
    await until("s Stopped", async () =>
      (await t.call("GET", `${SESSIONS}/s`)).body.status?.phase === "Stopped" ? true : undefined,
    );
    const uid = (await t.call("GET", `${SESSIONS}/s`)).body.metadata.uid;
    expect((await t.call("DELETE", `${SESSIONS}/s`)).status).toBeLessThan(300);
    const verified = await until(
      "4 verified deliveries",
      () => {
        const ok = r.got.map((g) => ({
          id: g.headers["webhook-id"],
          payload: new Verifier(secret).verify(g.body, g.headers as Record<string, string>) as Json,
        }));
        const unique = [...new Map(ok.map((x) => [x.id, x.payload])).values()];
        return unique.length >= 4 ? unique : undefined;
      },
      20_000,
    );
    expect(verified.map((p: Json) => [p.type, p.data.reason])).toEqual([
      ["created", "Created"],
      ["ready", "SessionReady"],
      ["stopped", "Stopped"],
      ["deleted", "Deleting"],
    ]);
    for (const p of verified) expect(p.data.session).toEqual({ namespace: "default", name: "s", uid });
    // The first message was answered 500 twice: the same webhook-id three times, then the rest.
    expect(r.got.length).toBe(6);
    expect(new Set(r.got.slice(0, 3).map((g) => g.headers["webhook-id"])).size).toBe(1);
    const deliveries = await t.call("GET", `${HOOKS}/life/deliveries`);
    expect(deliveries.status).toBe(200);
    const first = (deliveries.body.items as Json[]).filter((d) => d.type === "created").reverse();
    expect(first.map((d) => [d.attempt, d.statusCode, d.outcome])).toEqual([
      [1, 500, "retrying"],
      [2, 500, "retrying"],
      [3, 204, "succeeded"],
    ]);
    expect(JSON.stringify(deliveries.body)).not.toContain("whsec_");
  }, 60_000);

  it("a session deleted by its ttl sends expired, then deleted with reason Expired", async () => {
    const r = await receiver();
    servers.push(r.server);
    const created = await t.call(
      "PUT",
      `${HOOKS}/ends`,
      hook("ends", { url: r.url, events: ["expired", "deleted"], secret: SECRET }),
    );
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    await t.runner();
    const put = await t.call("PUT", `${SESSIONS}/brief`, {
      apiVersion: "agent-sessions.dev/v1alpha1",
      kind: "HarnessSession",
      metadata: { name: "brief" },
      spec: { agentRef: "alice", runtimeRef: "reference", ttl: "2s" },
    });
    expect(put.status).toBe(201);
    const got = await until("expired and deleted", () => (r.got.length >= 2 ? r.got : undefined), 20_000);
    const payloads = got.map(
      (g) => new Verifier(SECRET).verify(g.body, g.headers as Record<string, string>) as Json,
    );
    expect(payloads.map((p) => [p.type, p.data.reason])).toEqual([
      ["expired", "Expired"],
      ["deleted", "Expired"],
    ]);
    expect(payloads[0].data.message).toMatch(/spec.ttl 2s/);
  }, 30_000);

  it("never puts the secret in a log line, an answer or an error, even when delivery fails", async () => {
    const r = await receiver([500, 500, 500, 500]);
    servers.push(r.server);
    const answers: string[] = [];
    const put = await t.call(
      "PUT",
      `${HOOKS}/sink`,
      hook("sink", { url: r.url, events: ["created"], secret: SECRET }),
    );
    answers.push(JSON.stringify(put.body));
    const refused = await t.call(
      "PUT",
      `${HOOKS}/sink`,
      hook("sink", { url: "http://169.254.169.254/", events: ["created"], secret: SECRET }),
    );
    expect(refused.status).toBe(400);
    answers.push(JSON.stringify(refused.body));
    await t.runner();
    await t.call("PUT", `${SESSIONS}/quiet`, {
      apiVersion: "agent-sessions.dev/v1alpha1",
      kind: "HarnessSession",
      metadata: { name: "quiet" },
      spec: { agentRef: "alice", runtimeRef: "reference" },
    });
    await until("gave up", () => logLines.find((l) => l.includes("webhook delivery gave up")), 20_000);
    for (const path of [HOOKS, `${HOOKS}/sink`, `${HOOKS}/sink/deliveries`])
      answers.push(JSON.stringify((await t.call("GET", path)).body));
    const secretText = SECRET.slice("whsec_".length);
    for (const text of [...answers, ...logLines]) {
      expect(text).not.toContain(secretText);
      expect(text).not.toContain(SECRET);
    }
    expect(r.got).toHaveLength(4);
  }, 30_000);

  it("a receiver that never answers does not hold the session: it is Ready and Stopped while the first delivery hangs", async () => {
    const hanging: IncomingHttpHeaders[] = [];
    const server = createServer((req) => {
      hanging.push(req.headers); // never answered
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    servers.push(server);
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`;
    expect(
      (await t.call("PUT", `${HOOKS}/slow`, hook("slow", { url, events: ["created", "ready", "stopped"] })))
        .status,
    ).toBe(201);
    await t.runner();
    const manifest = (desiredState: string) => ({
      apiVersion: "agent-sessions.dev/v1alpha1",
      kind: "HarnessSession",
      metadata: { name: "unhindered" },
      spec: { agentRef: "alice", runtimeRef: "reference", desiredState },
    });
    expect((await t.call("PUT", `${SESSIONS}/unhindered`, manifest("running"))).status).toBe(201);
    await until("Ready", async () =>
      (await t.call("GET", `${SESSIONS}/unhindered`)).body.status?.phase === "Ready" ? true : undefined,
    );
    expect((await t.call("PUT", `${SESSIONS}/unhindered`, manifest("stopped"))).status).toBe(200);
    await until("Stopped", async () =>
      (await t.call("GET", `${SESSIONS}/unhindered`)).body.status?.phase === "Stopped" ? true : undefined,
    );
    // Only the first message (created) was attempted: the later events wait in their lane, the
    // session did not wait for any of them.
    expect(hanging.length).toBeGreaterThanOrEqual(1);
    expect(new Set(hanging.map((h) => h["webhook-id"])).size).toBe(1);
    const deliveries = await t.call("GET", `${HOOKS}/slow/deliveries`);
    expect((deliveries.body.items as Json[]).filter((d) => d.outcome === "succeeded")).toEqual([]);
    server.closeAllConnections();
  }, 30_000);

  it("a snapshot taken of a session sends snapshot.ready naming it", async () => {
    const r = await receiver();
    servers.push(r.server);
    expect(
      (
        await t.call(
          "PUT",
          `${HOOKS}/snaps`,
          hook("snaps", { url: r.url, events: ["snapshot.ready"], secret: SECRET }),
        )
      ).status,
    ).toBe(201);
    await t.runner({
      handler: (command) =>
        command.kind === "snapshot_take" ? { ok: true, result: { size_bytes: 77 } } : defaultHandler(command),
    });
    await t.call("PUT", `${SESSIONS}/kept`, {
      apiVersion: "agent-sessions.dev/v1alpha1",
      kind: "HarnessSession",
      metadata: { name: "kept" },
      spec: { agentRef: "alice", runtimeRef: "reference" },
    });
    await until("Ready", async () =>
      (await t.call("GET", `${SESSIONS}/kept`)).body.status?.phase === "Ready" ? true : undefined,
    );
    const taken = await t.call("POST", `${SESSIONS}/kept:snapshot`, { name: "kept-1" });
    expect(taken.status, JSON.stringify(taken.body)).toBe(201);
    const delivery = await until("snapshot.ready", () => r.got[0], 20_000);
    expect(
      new Verifier(SECRET).verify(delivery.body, delivery.headers as Record<string, string>),
    ).toMatchObject({
      type: "snapshot.ready",
      data: { session: { name: "kept" }, snapshot: "kept-1", reason: "SnapshotReady" },
    });
  }, 30_000);
});
