import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { readManifests } from "./apply.ts";

const noStdin = () => {
  throw new Error("stdin not expected");
};

describe("readManifests", () => {
  it("reads every document of every input in order, skipping empty ones", () => {
    const dir = mkdtempSync(join(tmpdir(), "apply-test-"));
    const file = join(dir, "m.yaml");
    writeFileSync(
      file,
      "kind: Agent\nmetadata: {name: a}\n---\n---\nkind: HarnessSession\nmetadata: {name: s}\n---\n",
    );
    const read = readManifests([file, "-"], () => "kind: AgentRuntime\nmetadata: {name: r}\n");
    expect(read.map((m) => `${m.manifest.kind}/${m.manifest.metadata.name}`)).toEqual([
      "Agent/a",
      "HarnessSession/s",
      "AgentRuntime/r",
    ]);
    expect(read[2]?.source).toBe("stdin document 1");
  });

  it("routes an MCPServer manifest to mcpservers", () => {
    const read = readManifests(
      ["-"],
      () => "kind: MCPServer\nmetadata: {name: tools}\nspec: {url: http://10.0.0.1/mcp}\n",
    );
    expect(read.map((m) => `${m.manifest.kind}/${m.manifest.metadata.name}`)).toEqual(["MCPServer/tools"]);
  });

  it("refuses, as usage errors, what cannot be routed: bad YAML, unknown kinds, no name", () => {
    expect(() => readManifests(["-"], () => "kind: [\n")).toThrow(/stdin document 1 is not valid YAML/);
    expect(() => readManifests(["-"], () => "kind: Pod\nmetadata: {name: p}\n")).toThrow(
      /kind must be one of AgentRuntime, Agent, MCPServer, SkillPack, HarnessSession, Webhook, got Pod/,
    );
    expect(() => readManifests(["-"], () => "kind: Agent\n")).toThrow(/metadata.name is required/);
    expect(() => readManifests(["-"], () => "- a\n- b\n")).toThrow(/is not a manifest/);
    expect(() => readManifests(["/nonexistent/m.yaml"], noStdin)).toThrow(
      /cannot read \/nonexistent\/m.yaml: ENOENT/,
    );
  });
});
