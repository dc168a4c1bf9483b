/**
 * Webhooks (issue 40) on one engine, real parts only: a server and a runner over the real
 * WebSocket, real Pulumi stacks, the engine and the reference runtime, and loopback receivers
 * (allowed past the webhook egress guard by AGENT_SESSIONS_WEBHOOK_EGRESS_ALLOW, as an operator
 * would). What a user checks: every delivery verifies with the Standard Webhooks library and the
 * Webhook's secret; a session's create → ready → stop arrive in order with their reasons; a
 * receiver that answers 500 gets the same message again until it succeeds, and `…/deliveries`
 * shows each attempt; a session with a ttl tells its Webhooks it expired.
 */
import { randomBytes } from "node:crypto";
import { createServer, type IncomingHttpHeaders, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { Webhook as Verifier } from "standardwebhooks";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { modelAgent } from "../fixtures/agent-manifest.ts";
import type { ModelServer } from "../fixtures/model-server.ts";
import { type Json, System, startSessionModelServer, until, writeLogTails } from "../support/system.ts";

export type WebhookScenarioOptions = {
  engine: "docker" | "kubernetes";
  /** Appended to every session and webhook name: the cluster is shared by test files. */
  suffix?: string;
};

const NS = "/v1/namespaces/default";
const SESSIONS = `${NS}/harnesssessions`;
const HOOKS = `${NS}/webhooks`;
const READY_MS = 300_000;

type Received = { headers: IncomingHttpHeaders; body: string };
type Receiver = { url: string; got: Received[]; server: Server };

/** A loopback receiver answering `statuses` in turn, then 204. */
async function receiver(statuses: number[] = []): Promise<Receiver> {
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

/** Every delivery verified with `secret` (a forged or altered one throws), one per webhook-id, in arrival order. */
function verified(r: Receiver, secret: string): Json[] {
  const byId = new Map<string, Json>();
  for (const g of r.got) {
    const payload = new Verifier(secret).verify(g.body, g.headers as Record<string, string>);
    byId.set(String(g.headers["webhook-id"]), payload);
  }
  return [...byId.values()];
}

export function webhookScenarios(options: WebhookScenarioOptions): void {
  const n = (name: string) => `${name}${options.suffix ?? ""}`;
  let system: System;
  let model: ModelServer;
  const receivers: Receiver[] = [];
  const call = (method: string, path: string, body?: unknown) => system.call(method, path, body);
  const hook = (name: string, url: string, events: string[]) => ({
    apiVersion: "agent-sessions.dev/v1alpha1",
    kind: "Webhook",
    metadata: { name },
    spec: { url, events },
  });
  const session = (name: string, spec: Record<string, unknown> = {}) => ({
    apiVersion: "agent-sessions.dev/v1alpha1",
    kind: "HarnessSession",
    metadata: { name },
    spec: { agentRef: "assistant", runtimeRef: "reference", ...spec },
  });
  const phaseOf = async (name: string) => (await call("GET", `${SESSIONS}/${name}`)).body.status?.phase;

  beforeAll(async () => {
    model = await startSessionModelServer(options.engine);
    process.env.E2E_MODEL_KEY = `sk-e2e-${randomBytes(12).toString("hex")}`;
    system = new System(undefined, {
      AGENT_SESSIONS_WEBHOOK_EGRESS_ALLOW: "127.0.0.1/32",
      AGENT_SESSIONS_WEBHOOK_RETRY_BASE_MS: "200",
    });
    await system.startServer();
    await system.startRunner(["--engine", options.engine]);
    const put = await call("PUT", `${NS}/agents/assistant`, modelAgent("assistant", model));
    expect(put.status, JSON.stringify(put.body)).toBe(201);
  }, 120_000);

  afterEach((context) => {
    if (context.task.result?.state === "fail") writeLogTails(system);
  });

  afterAll(async () => {
    for (const name of ["hooked", "brief"])
      await system?.call("DELETE", `${SESSIONS}/${n(name)}`).catch(() => undefined);
    await system?.stop();
    await model?.close();
    for (const r of receivers) r.server.close();
  });

  describe(`webhooks (${options.engine})`, () => {
    it("signed deliveries of create → ready → stop with reasons, in order; a failing receiver gets retries", async () => {
      const steady = await receiver();
      const flaky = await receiver([500, 500]);
      receivers.push(steady, flaky);
      const events = ["created", "ready", "stopped"];
      const a = await call("PUT", `${HOOKS}/${n("steady")}`, hook(n("steady"), steady.url, events));
      expect(a.status, JSON.stringify(a.body)).toBe(201);
      const b = await call("PUT", `${HOOKS}/${n("flaky")}`, hook(n("flaky"), flaky.url, events));
      expect(b.status, JSON.stringify(b.body)).toBe(201);
      const secrets = { steady: a.body.spec.secret as string, flaky: b.body.spec.secret as string };
      expect(secrets.steady).toMatch(/^whsec_/);
      expect((await call("GET", `${HOOKS}/${n("steady")}`)).body.spec.secret).toBeUndefined();

      const name = n("hooked");
      expect((await call("PUT", `${SESSIONS}/${name}`, session(name))).status).toBe(201);
      await until(
        `${name} Ready`,
        async () => ((await phaseOf(name)) === "Ready" ? true : undefined),
        READY_MS,
      );
      expect(
        (await call("PUT", `${SESSIONS}/${name}`, session(name, { desiredState: "stopped" }))).status,
      ).toBe(200);
      await until(
        `${name} Stopped`,
        async () => ((await phaseOf(name)) === "Stopped" ? true : undefined),
        120_000,
      );
      const uid = (await call("GET", `${SESSIONS}/${name}`)).body.metadata.uid;

      for (const [r, secret] of [
        [steady, secrets.steady],
        [flaky, secrets.flaky],
      ] as const) {
        const got = await until(
          "3 deliveries",
          () => (verified(r, secret).length >= 3 ? verified(r, secret) : undefined),
          60_000,
        );
        expect(got.map((p: Json) => [p.type, p.data.reason])).toEqual([
          ["created", "Created"],
          ["ready", "SessionReady"],
          ["stopped", "Stopped"],
        ]);
        for (const p of got) expect(p.data.session).toEqual({ namespace: "default", name, uid });
        // A delivery signed with another Webhook's secret does not verify.
        expect(() => verified(r, r === steady ? secrets.flaky : secrets.steady)).toThrow();
      }
      // The flaky receiver answered the first message 500 twice: three attempts, one webhook-id.
      expect(flaky.got.length).toBe(5);
      expect(new Set(flaky.got.slice(0, 3).map((g) => g.headers["webhook-id"])).size).toBe(1);
      const deliveries = await call("GET", `${HOOKS}/${n("flaky")}/deliveries`);
      expect(deliveries.status).toBe(200);
      const created = (deliveries.body.items as Json[]).filter((d) => d.type === "created").reverse();
      expect(created.map((d) => [d.attempt, d.statusCode, d.outcome])).toEqual([
        [1, 500, "retrying"],
        [2, 500, "retrying"],
        [3, 204, "succeeded"],
      ]);
      expect(steady.got.length).toBe(3);
    }, 600_000);

    it("a session with a ttl tells its Webhooks it expired, then that it was deleted (reason Expired)", async () => {
      const r = await receiver();
      receivers.push(r);
      const put = await call("PUT", `${HOOKS}/${n("ends")}`, hook(n("ends"), r.url, ["expired", "deleted"]));
      expect(put.status, JSON.stringify(put.body)).toBe(201);
      const secret = put.body.spec.secret as string;
      const name = n("brief");
      expect((await call("PUT", `${SESSIONS}/${name}`, session(name, { ttl: "30s" }))).status).toBe(201);
      const got = await until(
        "expired and deleted",
        () => (verified(r, secret).length >= 2 ? verified(r, secret) : undefined),
        300_000,
      );
      expect(got.map((p: Json) => [p.type, p.data.reason, p.data.session.name])).toEqual([
        ["expired", "Expired", name],
        ["deleted", "Expired", name],
      ]);
      expect(got[0].data.message).toMatch(/spec.ttl 30s/);
      expect((await call("GET", `${SESSIONS}/${name}`)).status).toBe(404);
    }, 600_000);
  });
}
