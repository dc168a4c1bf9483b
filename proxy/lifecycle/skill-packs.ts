import { CodedError } from "../../contracts/errors.ts";
import type { Agent, SkillPack } from "../../contracts/resources.ts";
import type { SessionSkill } from "../../contracts/session-spec.ts";
import type { Store } from "../store/store.ts";

/**
 * The SkillPacks an Agent names (`spec.skills[].skillPackRef`, in its namespace), in its order.
 * One that does not exist is FAILED_PRECONDITION, reason SkillPackNotFound, naming it and the
 * Agent, before anything is provisioned (a missing runtime fails alike); a HarnessSession that
 * failed so is retried when the pack is written (resource-routes.ts onWritten).
 */
export async function agentSkillPacks(store: Pick<Store, "getResource">, agent: Agent): Promise<SkillPack[]> {
  const { namespace, name } = agent.metadata;
  const packs: SkillPack[] = [];
  for (const { skillPackRef } of agent.spec.skills ?? []) {
    const pack = (await store.getResource("SkillPack", namespace, skillPackRef)) as SkillPack | undefined;
    if (!pack)
      throw new CodedError(
        "FAILED_PRECONDITION",
        `SkillPack ${namespace}/${skillPackRef} of Agent ${namespace}/${name} not found`,
        { reason: "SkillPackNotFound", skillPackRef },
      );
    packs.push(pack);
  }
  return packs;
}

/** A session spec's `skills`: every skill of the packs, in order; undefined when there are none. */
export function sessionSkills(packs: readonly SkillPack[]): SessionSkill[] | undefined {
  const skills = packs.flatMap((pack) =>
    pack.spec.skills.map((skill) => ({
      pack: pack.metadata.name,
      name: skill.name,
      description: skill.description,
      content: skill.content,
    })),
  );
  return skills.length === 0 ? undefined : skills;
}
