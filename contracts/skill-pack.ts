import { z } from "zod";
import { DnsLabel, type SessionSkill } from "./session-spec.ts";

export { SessionSkill } from "./session-spec.ts";

/**
 * A SkillPack (issue 39): Markdown skills an Agent's sessions get read-only at
 * `/skills/<pack>/<skill>.md`. Only text: Sympozium's SkillPack also carries a `sidecar` (a
 * container injected beside the agent, with `rbac`/`clusterRBAC` roles, a `secretRef`, extra
 * `volumes` and `hostAccess` — `hostNetwork`, `hostPID`, `privileged`, `runAsRoot`, hostPath
 * `mounts`) and `runtimeRequirements` (another image); a session never gets any of those
 * (privilegedSkillPackFields names them, and the API refuses them with SKILL_PACK_INVARIANT).
 */

/** Skills in one pack. */
export const SKILLS_PER_PACK_MAX = 16;
/** UTF-8 bytes of one skill's `content`. */
export const SKILL_CONTENT_MAX_BYTES = 32 * 1024;
/** Characters of one skill's `description`. */
export const SKILL_DESCRIPTION_MAX_CHARS = 1024;
/** UTF-8 bytes of a pack's descriptions and contents together. */
export const SKILL_PACK_MAX_BYTES = 128 * 1024;
/**
 * SkillPacks one Agent names: with SKILL_PACK_MAX_BYTES a session holds at most 512 KiB of skills,
 * under a Kubernetes ConfigMap's 1 MiB.
 */
export const SKILL_PACKS_PER_AGENT_MAX = 4;

/** The invariant a privileged SkillPack breaks, as every refusal names it. */
export const SKILL_PACK_INVARIANT =
  "sessions never get host namespaces, privileged containers or API credentials: a SkillPack for sessions carries Markdown skills only";

const utf8Bytes = (s: string) => new TextEncoder().encode(s).length;

export const Skill = z.strictObject({
  /** The file name: `/skills/<pack>/<name>.md`. */
  name: DnsLabel,
  description: z.string().max(SKILL_DESCRIPTION_MAX_CHARS).default(""),
  /** Markdown. */
  content: z
    .string()
    .min(1)
    .refine((s) => utf8Bytes(s) <= SKILL_CONTENT_MAX_BYTES, {
      message: `must be at most ${SKILL_CONTENT_MAX_BYTES} bytes (UTF-8)`,
    }),
  /** Sympozium's `requires` (binaries, tools the skill expects): kept, informational, never installed. */
  requires: z
    .strictObject({
      bins: z.array(z.string().min(1).max(256)).max(32).optional(),
      tools: z.array(z.string().min(1).max(256)).max(32).optional(),
    })
    .optional(),
});
export type Skill = z.infer<typeof Skill>;

export const SkillPackSpec = z.strictObject({
  skills: z
    .array(Skill)
    .min(1)
    .max(SKILLS_PER_PACK_MAX)
    .refine((skills) => new Set(skills.map((s) => s.name)).size === skills.length, {
      message: "skill names must be unique in a pack",
    })
    .refine(
      (skills) =>
        skills.reduce((n, s) => n + utf8Bytes(s.description) + utf8Bytes(s.content), 0) <=
        SKILL_PACK_MAX_BYTES,
      { message: `descriptions and contents together must be at most ${SKILL_PACK_MAX_BYTES} bytes (UTF-8)` },
    ),
  /** Sympozium's labels of a pack: kept, informational. */
  category: z.string().max(256).optional(),
  source: z.string().max(2048).optional(),
  version: z.string().max(256).optional(),
});
export type SkillPackSpec = z.infer<typeof SkillPackSpec>;

/** Agent `spec.skills[]`: a SkillPack in the Agent's namespace. */
export const AgentSkill = z.strictObject({ skillPackRef: DnsLabel });
export type AgentSkill = z.infer<typeof AgentSkill>;

export const AgentSkills = z
  .array(AgentSkill)
  .max(SKILL_PACKS_PER_AGENT_MAX)
  .refine((list) => new Set(list.map((s) => s.skillPackRef)).size === list.length, {
    message: "skillPackRef must be unique",
  });

/**
 * Where a manifest asks for privileged execution, as JSON paths (`spec.sidecar.hostAccess.privileged`):
 * Sympozium's sidecar and everything under it that reaches the host or the API, and
 * `spec.runtimeRequirements` (another image). Read from the raw body before parsing, so the
 * refusal names the invariant instead of "unrecognized key".
 */
export function privilegedSkillPackFields(body: unknown): string[] {
  const spec = record(record(body)?.spec);
  if (!spec) return [];
  const found: string[] = [];
  if (spec.runtimeRequirements !== undefined) found.push("spec.runtimeRequirements");
  const sidecar = record(spec.sidecar);
  if (spec.sidecar !== undefined && spec.sidecar !== null) found.push("spec.sidecar");
  if (sidecar) {
    for (const key of ["rbac", "clusterRBAC", "secretRef", "volumes", "volumeMounts", "requiresServer"])
      if (sidecar[key] !== undefined) found.push(`spec.sidecar.${key}`);
    const host = record(sidecar.hostAccess);
    if (sidecar.hostAccess !== undefined) found.push("spec.sidecar.hostAccess");
    if (host)
      for (const key of ["hostNetwork", "hostPID", "privileged", "runAsRoot", "mounts"])
        if (host[key] !== undefined && host[key] !== false) found.push(`spec.sidecar.hostAccess.${key}`);
  }
  return found;
}

function record(value: unknown): Record<string, unknown> | undefined {
  return value !== null && typeof value === "object" && !Array.isArray(value)
    ? (value as Record<string, unknown>)
    : undefined;
}

/** Where a session finds its skills. */
export const SKILLS_DIR = "/skills";
/** The pod volume of a session's skills on Kubernetes (a configMap; the policy pack knows it). */
export const SKILLS_VOLUME = "skills";

/** `/skills/<pack>/<name>.md`, relative to SKILLS_DIR: `<pack>/<name>.md`. */
export function skillFilePath(skill: Pick<SessionSkill, "pack" | "name">): string {
  return `${skill.pack}/${skill.name}.md`;
}

/**
 * A skill file's content: YAML front matter (`name`, `description`: what pi's and Hermes' skill
 * loaders read, agentskills.io's SKILL.md form) unless the content starts with its own, then the
 * Markdown.
 */
export function skillFileContent(skill: SessionSkill): string {
  if (skill.content.startsWith("---\n")) return skill.content;
  const description = JSON.stringify(skill.description || skill.name);
  return `---\nname: ${skill.name}\ndescription: ${description}\n---\n\n${skill.content}`;
}
