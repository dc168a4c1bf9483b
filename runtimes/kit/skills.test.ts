import { mkdirSync, mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { skillFileContent } from "../../contracts/skill-pack.ts";
import { frontMatterDescription, sessionSkillFiles, skillsPrompt } from "./skills.ts";

describe("the session's skills as a runtime finds them (issue 39)", () => {
  it("lists /skills/<pack>/<skill>.md in name order with each description, and says how to use them", () => {
    const dir = mkdtempSync(join(tmpdir(), "skills-"));
    for (const [pack, name, description] of [
      ["tips", "greeting", 'Greets: "hello"'],
      ["alpha", "b", ""],
    ] as const) {
      mkdirSync(join(dir, pack), { recursive: true });
      writeFileSync(
        join(dir, pack, `${name}.md`),
        skillFileContent({ pack, name, description, content: "# x" }),
      );
    }
    writeFileSync(join(dir, "tips", "notes.txt"), "not a skill");
    const files = sessionSkillFiles(dir);
    expect(files).toEqual([
      { pack: "alpha", name: "b", description: "b", path: join(dir, "alpha", "b.md") },
      {
        pack: "tips",
        name: "greeting",
        description: 'Greets: "hello"',
        path: join(dir, "tips", "greeting.md"),
      },
    ]);
    const prompt = skillsPrompt(files);
    expect(prompt).toContain(`- tips/greeting: Greets: "hello" (${join(dir, "tips", "greeting.md")})`);
    expect(prompt).toContain("read its file");
  });

  it("no mount, no skills, no prompt", () => {
    expect(sessionSkillFiles("/nonexistent-skills-dir")).toEqual([]);
    expect(skillsPrompt([])).toBe("");
  });

  it("reads a plain front matter description, and none without front matter", () => {
    expect(frontMatterDescription("---\nname: a\ndescription: plain words\n---\n# a")).toBe("plain words");
    expect(frontMatterDescription("# no front matter")).toBe("");
  });
});
