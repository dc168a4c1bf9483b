/**
 * Expiry (issue 40) on the server against a fake runner: a session's status says when it ends, it
 * is deleted once spec.ttl (or spec.expiresAt) is reached (its workspace removed, the record
 * gone) while a longer-lived one stays, extending the ttl keeps it, and bad input is a 400 that
 * changes nothing.
 */
import { describe, expect, it } from "vitest";
import { until } from "../../test/support/until.ts";
import { serverPerTest } from "../testing/test-server.ts";

// biome-ignore lint/suspicious/noExplicitAny: JSON bodies of many shapes, read by assertions
type Json = any;

const BASE = "/v1/namespaces/default/harnesssessions";
const t = serverPerTest();

function manifest(name: string, spec: Record<string, unknown> = {}) {
  return {
    apiVersion: "agent-sessions.dev/v1alpha1",
    kind: "HarnessSession",
    metadata: { name },
    spec: { agentRef: "alice", runtimeRef: "reference", ...spec },
  };
}

async function get(name: string): Promise<{ status: number; body: Json }> {
  return t().call("GET", `${BASE}/${name}`);
}

async function readySession(name: string, spec: Record<string, unknown> = {}): Promise<Json> {
  expect((await t().call("PUT", `${BASE}/${name}`, manifest(name, spec))).status).toBe(201);
  return until(`${name} Ready`, async () => {
    const s = (await get(name)).body;
    return s.status.phase === "Ready" ? s : undefined;
  });
}

describe("session expiry", () => {
  it("deletes a session once its ttl is reached, and only that one", async () => {
    const runner = await t().runner();
    const short = await readySession("short", { ttl: "3s" });
    await readySession("long", { ttl: "1h" });
    const created = Date.parse(short.metadata.creationTimestamp);
    expect(Date.parse(short.status.expiresAt)).toBe(created + 3000);
    const events = await t().events(`?session_id=${short.status.sessionId}`);
    await until("short gone", async () => ((await get("short")).status === 404 ? true : undefined), 20_000);
    // The session's stream says why: an Expired event naming the field and the time.
    await events.until((all) => all.some((e) => e.data.includes('"event":"Expired"')));
    const expired = JSON.parse(events.events.find((e) => e.data.includes('"event":"Expired"'))?.data ?? "{}");
    expect(expired.payload).toMatchObject({
      reason: "Expired",
      harness_session: { namespace: "default", name: "short" },
      expiresAt: short.status.expiresAt,
    });
    expect(expired.payload.message).toMatch(/spec.ttl 3s/);
    events.close();
    expect(Date.now()).toBeGreaterThanOrEqual(created + 3000);
    expect(runner.commandsOf("remove").length).toBe(1);
    const long = await get("long");
    expect(long.status).toBe(200);
    expect(long.body.status.phase).toBe("Ready");
    expect(long.body.metadata.deletionTimestamp).toBeUndefined();
  });

  it("a ttl extended before it is reached keeps the session", async () => {
    await t().runner();
    await readySession("kept", { ttl: "3s" });
    const patch = await t().call("PATCH", `${BASE}/kept`, { spec: { ttl: "1h" } });
    expect(patch.status).toBe(200);
    await new Promise((resolve) => setTimeout(resolve, 6000));
    const after = await get("kept");
    expect(after.status).toBe(200);
    expect(after.body.metadata.deletionTimestamp).toBeUndefined();
  });

  it("expiresAt deletes the session at that time", async () => {
    await t().runner();
    const at = new Date(Date.now() + 3000).toISOString();
    const s = await readySession("dated", { expiresAt: at });
    expect(s.status.expiresAt).toBe(at);
    await until("dated gone", async () => ((await get("dated")).status === 404 ? true : undefined), 20_000);
  });
});

describe("session expiry: bad input is a 400 that changes nothing", () => {
  it("a ttl already past at a write of an existing session", async () => {
    await t().runner();
    const before = await readySession("s1");
    const patch = await t().call("PATCH", `${BASE}/s1`, { spec: { ttl: "1ms" } });
    expect(patch.status).toBe(400);
    expect(patch.body.code).toBe("INVALID_ARGUMENT");
    expect(patch.body.message).toMatch(/spec.ttl must end in the future: 1ms after the session's creation/);
    const after = (await get("s1")).body;
    expect(after.metadata.generation).toBe(before.metadata.generation);
    expect(after.spec.ttl).toBeUndefined();
  });

  it.each([
    ["ttl 0", { ttl: "0" }, /spec.ttl/],
    ["a negative ttl", { ttl: "-1m" }, /spec.ttl/],
    ["a garbage ttl", { ttl: "soon" }, /spec.ttl/],
    ["an absurd ttl", { ttl: "100000h" }, /spec.ttl/],
    ["ttl and expiresAt", { ttl: "1h", expiresAt: "2099-01-01T00:00:00Z" }, /not both/],
    ["an expiresAt in the past", { expiresAt: "2020-01-01T00:00:00Z" }, /already past/],
    ["an expiresAt years ahead", { expiresAt: "2099-01-01T00:00:00Z" }, /366 days/],
    ["an expiresAt without a zone", { expiresAt: "2099-01-01T00:00:00" }, /spec.expiresAt/],
  ])("%s", async (_what, spec, message) => {
    await t().runner();
    const before = await readySession("s1");
    const put = await t().call("PUT", `${BASE}/s1`, manifest("s1", spec));
    expect(put.status).toBe(400);
    expect(put.body.code).toBe("INVALID_ARGUMENT");
    expect(put.body.message).toMatch(message);
    const patch = await t().call("PATCH", `${BASE}/s1`, { spec });
    expect(patch.status).toBe(400);
    const after = (await get("s1")).body;
    expect(after.metadata.generation).toBe(before.metadata.generation);
    expect(after.spec).toEqual(before.spec);
    const created = await t().call("PUT", `${BASE}/s2`, manifest("s2", spec));
    expect(created.status).toBe(400);
    expect((await get("s2")).status).toBe(404);
  });
});
