import { CodedError } from "../../contracts/errors.ts";
import type { Agent, AgentRuntime, SkillPack } from "../../contracts/resources.ts";
import { type Engine, SessionSpec } from "../../contracts/session-spec.ts";
import { repoEgressProblem, type SeedRepo } from "../../contracts/workspace-repo.ts";
import { type Admission, defaultAdmission } from "./admission.ts";
import { namespacedOfferKey, SERVER_SETTINGS_PREFIX } from "./credential-env.ts";
import { sessionSkills } from "./skill-packs.ts";

/**
 * A runtime may back a session only when approved (by the operator's configuration) and declaring the session contract v1alpha2
 * (v1alpha1 runtimes stay one-shot). Checked before anything is provisioned.
 */
export function assertSessionRuntime(runtime: AgentRuntime, admission: Admission = defaultAdmission()): void {
  const ref = `${runtime.metadata.namespace}/${runtime.metadata.name}`;
  if (runtime.spec.contract !== "v1alpha2")
    throw new CodedError(
      "FAILED_PRECONDITION",
      `AgentRuntime ${ref} declares contract ${runtime.spec.contract} (one-shot); sessions need a runtime that declares v1alpha2`,
      { reason: "RuntimeContractUnsupported" },
    );
  assertApproved(runtime, admission);
}

/** FAILED_PRECONDITION, reason RuntimeNotApproved, unless the operator's configuration approves it. */
export function assertApproved(runtime: AgentRuntime, admission: Admission): void {
  const ref = `${runtime.metadata.namespace}/${runtime.metadata.name}`;
  const verdict = admission.runtimes.verdict(runtime);
  if (!verdict.approved)
    throw new CodedError("FAILED_PRECONDITION", `AgentRuntime ${ref} is not approved: ${verdict.message}`, {
      reason: "RuntimeNotApproved",
    });
}

/**
 * The SessionSpec of a workspace, from its Agent and the Agent's runtime: image, contract and
 * agent command from the runtime, streaming only when the runtime declares it, egress and plain
 * env (model URL and name) from the Agent. Credentials never go in here (see `resolveCredentials`).
 * The Agent's egress must pass the server's egress guard (FAILED_PRECONDITION, reason
 * EgressForbidden, naming each refused rule), and the spec carries the ports the policy pack refuses.
 */
export function buildSessionSpec(input: {
  namespace: string;
  name: string;
  engine: Engine;
  agent: Agent;
  runtime: AgentRuntime;
  /** @default defaultAdmission() */
  admission?: Admission;
  /** The repository the workspace is seeded from; reachable under the Agent's egress, its credential the Agent's. */
  repo?: SeedRepo | undefined;
  /** The Agent's SkillPacks (agentSkillPacks), mounted at /skills. @default none */
  skillPacks?: readonly SkillPack[];
  /** A HarnessSession's declared ports (spec.ports); absent or empty: none. */
  ports?: SessionSpec["ports"] | undefined;
}): SessionSpec {
  const { agent, runtime, repo } = input;
  const skills = sessionSkills(input.skillPacks ?? []);
  const { egress } = input.admission ?? defaultAdmission();
  const agentRef = `${agent.metadata.namespace}/${agent.metadata.name}`;
  egress.assertAllowed(agent.spec.egress, `Agent ${agentRef}`, "FAILED_PRECONDITION");
  if (agent.spec.model)
    egress.assertModelAllowed(agent.spec.model.baseUrl, `Agent ${agentRef}`, "FAILED_PRECONDITION");
  if (repo) assertRepoAdmitted(repo, agent, "workstream.repo");
  const env: Record<string, string> = {};
  if (agent.spec.model) {
    env.MODEL_BASE_URL = agent.spec.model.baseUrl;
    env.MODEL_NAME = agent.spec.model.name;
  }
  const parsed = SessionSpec.safeParse({
    namespace: input.namespace,
    name: input.name,
    engine: input.engine,
    image: runtime.spec.image,
    contract: runtime.spec.contract,
    streaming: runtime.spec.capabilities.includes("streaming"),
    ...(runtime.spec.agent ? { agentCommand: runtime.spec.agent.command } : {}),
    ...(runtime.spec.session ? { session: runtime.spec.session } : {}),
    egress: agent.spec.egress,
    ...(repo ? { repo } : {}),
    ...(input.ports?.length ? { ports: input.ports } : {}),
    forbiddenEgressPorts: egress.forbiddenPorts,
    ...(skills ? { skills } : {}),
    env,
  });
  if (!parsed.success)
    throw new CodedError(
      "FAILED_PRECONDITION",
      `the Agent and its runtime do not make a valid session spec`,
      {
        issues: parsed.error.issues.map((i) => ({ path: i.path.join("."), message: i.message })),
      },
    );
  return parsed.data;
}

/**
 * The repository a workspace is seeded from must be reachable under the Agent's egress
 * (reason RepoNotInEgress) and its credential one of the Agent's (CredentialNotAllowed), else
 * FAILED_PRECONDITION before anything is provisioned. `field` is where the request named it
 * (`workstream.repo` on the RPC path, `spec.workspace.repo` on a HarnessSession): both paths
 * refuse alike.
 */
export function assertRepoAdmitted(
  repo: Pick<SeedRepo, "url" | "credential">,
  agent: Agent,
  field: string,
): void {
  const agentRef = `${agent.metadata.namespace}/${agent.metadata.name}`;
  const problem = repoEgressProblem(repo.url, agent.spec.egress);
  if (problem)
    throw new CodedError("FAILED_PRECONDITION", `${problem} (Agent ${agentRef})`, {
      reason: "RepoNotInEgress",
      field: `${field}.url`,
    });
  if (repo.credential && !agent.spec.credentials.some((c) => c.name === repo.credential))
    throw new CodedError(
      "FAILED_PRECONDITION",
      `repository credential ${repo.credential} is not in the credentials of Agent ${agentRef}`,
      { reason: "CredentialNotAllowed", field: `${field}.credential` },
    );
}

/**
 * Why the server cannot read the variable a credential's `secretRef.env` names for an Agent of
 * `namespace`: not offered to that namespace (CredentialNotOffered), or offered but unset in the
 * server's environment (CredentialUnresolved); else its value. Asked when an Agent is written
 * (resource-routes.ts) and again at every provision: a variable can vanish between the two.
 */
export function offeredCredential(
  namespace: string,
  variable: string,
  offered: Readonly<Record<string, string | undefined>>,
):
  | { ok: true; value: string }
  | { ok: false; reason: "CredentialNotOffered" | "CredentialUnresolved"; why: string } {
  // Offered to this namespace only, else to every namespace.
  const scoped = namespacedOfferKey(namespace, variable);
  const key = Object.hasOwn(offered, scoped) ? scoped : variable;
  if (variable.startsWith(SERVER_SETTINGS_PREFIX) || variable.includes("/") || !Object.hasOwn(offered, key))
    return {
      ok: false,
      reason: "CredentialNotOffered",
      why: `which the server does not offer to sessions of namespace ${namespace} (an operator lists the variables it offers in AGENT_SESSIONS_CREDENTIAL_ENV, as NAME for every namespace or ${namespace}/NAME for this one; ${SERVER_SETTINGS_PREFIX}* settings never)`,
    };
  const value = offered[key];
  if (value === undefined || value === "")
    return { ok: false, reason: "CredentialUnresolved", why: "which the server's environment does not set" };
  return { ok: true, value };
}

/**
 * The credentials a session receives: exactly the Agent's allowlist, literal values as given and
 * `secretRef`s read from `offered`, the environment the server offers to sessions
 * (`offeredCredentialEnv`: only the variables the operator lists in AGENT_SESSIONS_CREDENTIAL_ENV,
 * never the server's own AGENT_SESSIONS_* settings). A reference to any other variable is
 * FAILED_PRECONDITION, reason CredentialNotOffered (CredentialUnresolved when it is offered but
 * unset); messages name variables, never values.
 */
export function resolveCredentials(
  agent: Agent,
  offered: Readonly<Record<string, string | undefined>>,
): Record<string, string> {
  const ref = `${agent.metadata.namespace}/${agent.metadata.name}`;
  const out: Record<string, string> = {};
  for (const credential of agent.spec.credentials) {
    if (credential.value !== undefined) {
      out[credential.name] = credential.value;
      continue;
    }
    const variable = credential.secretRef?.env ?? "";
    const read = offeredCredential(agent.metadata.namespace, variable, offered);
    if (!read.ok)
      throw new CodedError(
        "FAILED_PRECONDITION",
        `credential ${credential.name} of Agent ${ref} refers to environment variable ${variable}, ${read.why}`,
        { reason: read.reason, credential: credential.name, variable },
      );
    out[credential.name] = read.value;
  }
  return out;
}
