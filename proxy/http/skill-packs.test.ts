import type { Hono } from "hono";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { API_VERSION } from "../../contracts/resources.ts";
import { SKILL_CONTENT_MAX_BYTES, SKILL_PACK_INVARIANT } from "../../contracts/skill-pack.ts";
import { SqliteStore } from "../store/sqlite-store.ts";
import { testApp } from "../testing/test-app.ts";
import { ADMIN_TOKEN } from "../testing/test-server.ts";

// biome-ignore lint/suspicious/noExplicitAny: JSON bodies of many shapes, read by assertions
type Json = any;

let store: SqliteStore;
let app: Hono;

beforeEach(() => {
  store = new SqliteStore(":memory:");
  app = testApp(store);
});
afterEach(async () => {
  await store.close();
});

async function call(method: string, path: string, body?: unknown): Promise<{ status: number; body: Json }> {
  const reply = await app.request(path, {
    method,
    headers: { authorization: `Bearer ${ADMIN_TOKEN}`, "content-type": "application/json" },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  return { status: reply.status, body: await reply.json() };
}

const PACKS = "/v1/namespaces/default/skillpacks";
const pack = (spec: Record<string, unknown>) => ({
  apiVersion: API_VERSION,
  kind: "SkillPack",
  metadata: { name: "tips" },
  spec: {
    skills: [{ name: "greeting", description: "How to greet", content: "# Greeting\n\nSay hello." }],
    ...spec,
  },
});

describe("SkillPack (issue 39)", () => {
  it("is written, read, listed and deleted like the other kinds", async () => {
    const put = await call("PUT", `${PACKS}/tips`, pack({}));
    expect(put.status, JSON.stringify(put.body)).toBe(201);
    expect(put.body.spec.skills[0]).toMatchObject({ name: "greeting", description: "How to greet" });
    expect((await call("GET", `${PACKS}/tips`)).body.spec.skills).toHaveLength(1);
    const list = await call("GET", PACKS);
    expect(list.body.kind).toBe("SkillPackList");
    expect(list.body.items.map((p: Json) => p.metadata.name)).toEqual(["tips"]);
    expect((await call("DELETE", `${PACKS}/tips`)).status).toBe(200);
    expect((await call("GET", `${PACKS}/tips`)).status).toBe(404);
  });

  it.each<[string, Record<string, unknown>, string]>([
    ["a sidecar", { sidecar: { image: "bitnami/kubectl" } }, "spec.sidecar"],
    [
      "host access",
      {
        sidecar: {
          image: "x",
          hostAccess: { enabled: true, hostNetwork: true, hostPID: true, privileged: true },
        },
      },
      "spec.sidecar.hostAccess.hostNetwork",
    ],
    [
      "RBAC",
      { sidecar: { image: "x", rbac: [{ apiGroups: [""], resources: ["pods"], verbs: ["get"] }] } },
      "spec.sidecar.rbac",
    ],
    [
      "cluster RBAC",
      { sidecar: { image: "x", clusterRBAC: [{ apiGroups: [""], resources: ["nodes"], verbs: ["list"] }] } },
      "spec.sidecar.clusterRBAC",
    ],
    ["another image", { runtimeRequirements: { image: "busybox" } }, "spec.runtimeRequirements"],
  ])(
    "one asking for %s is INVALID_ARGUMENT naming the invariant, and nothing is stored",
    async (_, spec, field) => {
      const put = await call("PUT", `${PACKS}/tips`, pack(spec));
      expect(put.status).toBe(400);
      expect(put.body.code).toBe("INVALID_ARGUMENT");
      expect(put.body.message).toContain(SKILL_PACK_INVARIANT);
      expect(put.body.message).toContain(field);
      expect(put.body.details.field_violations.map((v: Json) => v.field)).toContain(field);
      expect((await call("GET", `${PACKS}/tips`)).status).toBe(404);
    },
  );

  it.each<[string, Record<string, unknown>, string]>([
    ["no skills", { skills: [] }, "spec.skills"],
    [
      "a skill name that is no DNS label",
      { skills: [{ name: "Bad_Name", content: "x" }] },
      "spec.skills.0.name",
    ],
    [
      "two skills of one name",
      {
        skills: [
          { name: "a", content: "x" },
          { name: "a", content: "y" },
        ],
      },
      "unique",
    ],
    ["empty content", { skills: [{ name: "a", content: "" }] }, "spec.skills.0.content"],
    [
      "content over the bound",
      { skills: [{ name: "a", content: "é".repeat(SKILL_CONTENT_MAX_BYTES / 2 + 1) }] },
      `${SKILL_CONTENT_MAX_BYTES} bytes`,
    ],
    [
      "17 skills",
      { skills: Array.from({ length: 17 }, (_, i) => ({ name: `s${i}`, content: "x" })) },
      "spec.skills",
    ],
    [
      "a pack over 128 KiB",
      { skills: Array.from({ length: 5 }, (_, i) => ({ name: `s${i}`, content: "x".repeat(30_000) })) },
      "131072 bytes",
    ],
  ])("%s is INVALID_ARGUMENT naming the field", async (_, spec, named) => {
    const put = await call("PUT", `${PACKS}/tips`, pack(spec));
    expect(put.status, JSON.stringify(put.body)).toBe(400);
    expect(put.body.code).toBe("INVALID_ARGUMENT");
    expect(put.body.message).toContain(named);
    expect((await call("GET", `${PACKS}/tips`)).status).toBe(404);
  });

  it("an Agent names SkillPacks by skillPackRef, at most 4, each once", async () => {
    const agent = (skills: unknown) => ({
      apiVersion: API_VERSION,
      kind: "Agent",
      metadata: { name: "bob" },
      spec: { runtimeRef: "reference", skills },
    });
    const ok = await call("PUT", "/v1/namespaces/default/agents/bob", agent([{ skillPackRef: "tips" }]));
    expect(ok.status, JSON.stringify(ok.body)).toBe(201);
    expect(ok.body.spec.skills).toEqual([{ skillPackRef: "tips" }]);
    for (const bad of [
      [{ skillPackRef: "tips" }, { skillPackRef: "tips" }],
      Array.from({ length: 5 }, (_, i) => ({ skillPackRef: `p${i}` })),
      [{ skillPackRef: "tips", sidecar: {} }],
    ]) {
      const put = await call("PUT", "/v1/namespaces/default/agents/bob", agent(bad));
      expect(put.status, JSON.stringify(bad)).toBe(400);
    }
  });
});
