/**
 * The session's skills (issue 39) as a runtime finds them: Markdown files mounted read-only at
 * `/skills/<pack>/<skill>.md`, each starting with front matter `name` and `description`
 * (contracts/skill-pack.ts skillFileContent). A harness with a skills mechanism of its own is
 * handed the files (pi: `--skill <path>`); the others get `skillsPrompt` in their system prompt.
 */
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { SKILLS_DIR } from "../../contracts/skill-pack.ts";

export type SkillFile = { pack: string; name: string; description: string; path: string };

/**
 * Every skill file under `dir`, packs and skills in name order; none (no mount, an empty one):
 * []. @default dir AGENT_SKILLS_DIR, else /skills
 */
export function sessionSkillFiles(dir = process.env.AGENT_SKILLS_DIR ?? SKILLS_DIR): SkillFile[] {
  const files: SkillFile[] = [];
  for (const pack of listDir(dir)) {
    for (const file of listDir(join(dir, pack))) {
      if (!file.endsWith(".md")) continue;
      const path = join(dir, pack, file);
      let text: string;
      try {
        text = readFileSync(path, "utf8");
      } catch {
        continue;
      }
      files.push({ pack, name: file.slice(0, -3), description: frontMatterDescription(text), path });
    }
  }
  return files;
}

function listDir(dir: string): string[] {
  try {
    return readdirSync(dir).sort();
  } catch {
    return [];
  }
}

/** `description:` of the file's front matter (a JSON string or a plain line); none: "". */
export function frontMatterDescription(text: string): string {
  if (!text.startsWith("---\n")) return "";
  const end = text.indexOf("\n---", 4);
  const head = end < 0 ? "" : text.slice(4, end);
  const line = head.split("\n").find((l) => l.startsWith("description:"));
  const value = line?.slice("description:".length).trim() ?? "";
  if (value.startsWith('"')) {
    try {
      return String(JSON.parse(value));
    } catch {
      return value;
    }
  }
  return value;
}

/**
 * What a system prompt says of the skills: each one's name, description and file, and that the
 * agent reads a skill's file when the task calls for it. Empty when there are none.
 */
export function skillsPrompt(skills: readonly SkillFile[]): string {
  if (skills.length === 0) return "";
  const lines = skills.map(
    (s) => `- ${s.pack}/${s.name}: ${s.description || "(no description)"} (${s.path})`,
  );
  return [
    "## Skills",
    "These skills are available, read-only. When a task matches a skill's description, read its file and follow it.",
    ...lines,
  ].join("\n");
}
