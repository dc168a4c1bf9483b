/**
 * A session's skills on Docker (skills-scenarios.ts): the read-only skills volume at /skills,
 * the skill in the prompt of the reference runtime, pi, hermes and compass, a privileged
 * SkillPack refused.
 */
import { dockerProbe } from "../support/engine-probes.ts";
import { skillsScenarios } from "./skills-scenarios.ts";

skillsScenarios({
  engine: "docker",
  probe: () => dockerProbe(),
  runtimes: ["reference", "pi", "hermes", "compass"],
});
