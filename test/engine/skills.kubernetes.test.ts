/**
 * A session's skills on Kubernetes (skills-scenarios.ts): the skills ConfigMap read-only at
 * /skills, the skill in the prompt of the reference runtime, pi and hermes, a privileged
 * SkillPack refused.
 */
import { kubernetesProbe } from "../support/engine-probes.ts";
import { applyTestbedEnv } from "../support/testbed.ts";
import { skillsScenarios } from "./skills-scenarios.ts";

applyTestbedEnv();

skillsScenarios({
  engine: "kubernetes",
  probe: () => kubernetesProbe("agent-sessions"),
  runtimes: ["reference", "pi", "hermes"],
});
