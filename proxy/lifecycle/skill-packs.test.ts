import { describe, expect, it } from "vitest";
import { Agent, AgentRuntime, SkillPack } from "../../contracts/resources.ts";
import { SqliteStore } from "../store/sqlite-store.ts";
import { TEST_IMAGE } from "../testing/test-server.ts";
import { buildSessionSpec } from "./session-spec-builder.ts";
import { agentSkillPacks } from "./skill-packs.ts";

const meta = { apiVersion: "agent-sessions.dev/v1alpha1" } as const;
const runtime = AgentRuntime.parse({
  ...meta,
  kind: "AgentRuntime",
  metadata: { name: "rt" },
  spec: { image: TEST_IMAGE, contract: "v1alpha2" },
});
const agent = (skills?: { skillPackRef: string }[]) =>
  Agent.parse({
    ...meta,
    kind: "Agent",
    metadata: { name: "alice" },
    spec: { runtimeRef: "rt", ...(skills ? { skills } : {}) },
  });
const pack = (name: string, skills: string[]) =>
  SkillPack.parse({
    ...meta,
    kind: "SkillPack",
    metadata: { name },
    spec: { skills: skills.map((s) => ({ name: s, description: `about ${s}`, content: `# ${s}` })) },
  });

describe("an Agent's SkillPacks in its session spec (issue 39)", () => {
  it("a missing SkillPack is FAILED_PRECONDITION, reason SkillPackNotFound, naming it and the Agent", async () => {
    const store = new SqliteStore(":memory:");
    try {
      await store.putResource(pack("one", ["a"]));
      await expect(
        agentSkillPacks(store, agent([{ skillPackRef: "one" }, { skillPackRef: "two" }])),
      ).rejects.toMatchObject({
        code: "FAILED_PRECONDITION",
        message: "SkillPack default/two of Agent default/alice not found",
        details: { reason: "SkillPackNotFound" },
      });
      await store.putResource(pack("two", ["b", "c"]));
      const packs = await agentSkillPacks(store, agent([{ skillPackRef: "two" }, { skillPackRef: "one" }]));
      const spec = buildSessionSpec({
        namespace: "default",
        name: "w",
        engine: "docker",
        agent: agent(),
        runtime,
        skillPacks: packs,
      });
      expect(spec.skills?.map((s) => `${s.pack}/${s.name}: ${s.description}`)).toEqual([
        "two/b: about b",
        "two/c: about c",
        "one/a: about a",
      ]);
    } finally {
      await store.close();
    }
  });

  it("an Agent without skills makes the spec it made before: no skills key at all", () => {
    const spec = buildSessionSpec({
      namespace: "default",
      name: "w",
      engine: "docker",
      agent: agent(),
      runtime,
      skillPacks: [],
    });
    expect(spec).not.toHaveProperty("skills");
    expect(agent().spec).not.toHaveProperty("skills");
  });
});
