import { z } from "zod";
import {
  AgentCommand,
  DigestPinnedImage,
  DnsLabel,
  EgressRule,
  RuntimeContract,
  SessionProtocol,
} from "./session-spec.ts";
import { AgentMcpServers, MCPServer } from "./mcp.ts";
import { AgentSkills, SkillPackSpec } from "./skill-pack.ts";

/**
 * The namespaced resources of `/v1/namespaces/{ns}/…`, kubectl-style manifests:
 * `{apiVersion, kind, metadata: {name, namespace}, spec}`. Desired state lives in `spec`; these
 * two kinds have no observed state.
 */
export const API_VERSION = "agent-sessions.dev/v1alpha1";

export const ObjectMeta = z.object({
  name: DnsLabel,
  namespace: DnsLabel.default("default"),
  /** Set by the server on first create; ignored on input. */
  creationTimestamp: z.string().datetime().optional(),
});
export type ObjectMeta = z.infer<typeof ObjectMeta>;

/**
 * The agent command of a runtime that declares none (`spec.agent`): the reference agent, baked
 * into the reference image (scripts/testbed.d/image.sh).
 */
export const REFERENCE_AGENT_COMMAND: readonly string[] = ["/bin/node", "/app/runtimes/reference/agent.ts"];

/**
 * What a runtime declares it can do beyond the contract's baseline: `streaming` (streamed replies),
 * `tools` (the agent calls tools inside its workspace and streams `tool` events), `resume` (its
 * conversation survives a restart of the workload: it is kept on the session volume), `mcp` (its
 * agent calls the tools of the Agent's MCP servers through the runner's gateway, contracts/mcp.ts).
 */
export const RuntimeCapability = z.enum(["streaming", "tools", "resume", "mcp"]);
export type RuntimeCapability = z.infer<typeof RuntimeCapability>;

export const AgentRuntimeSpec = z
  .strictObject({
    image: DigestPinnedImage,
    /** v1alpha1 runtimes stay one-shot; only v1alpha2 runtimes can back a session. */
    contract: RuntimeContract,
    capabilities: z.array(RuntimeCapability).default([]),
    /**
     * Ignored, never stored: approval is the operator's configuration (AGENT_SESSIONS_APPROVED_REGISTRIES,
     * AGENT_SESSIONS_APPROVED_RUNTIMES), read back as `status.approved`. Accepted so older manifests
     * still apply.
     */
    approved: z.boolean().optional(),
    /**
     * The one-shot entry a v1alpha1 runtime's AgentRun executes (contracts/agent-run.ts); default:
     * the image's entrypoint. Sessions (v1alpha2) ignore it.
     */
    command: z.array(z.string().min(1).max(4096)).min(1).max(64).optional(),
    /**
     * The runtime's agent for seed-004 sessions (StartAgentSession): `command` is the argv the
     * runner executes inside the workload over a long-lived exec stream (compass.v1 on stdout, JSON
     * commands on stdin). Default: the reference agent (`/bin/node /app/runtimes/reference/agent.ts`).
     */
    agent: z.strictObject({ command: AgentCommand }).optional(),
    /**
     * Workspaces kept provisioned ahead, per Agent bound to this runtime (runner/sessions/warm-pool.ts):
     * a new workspace of such an Agent claims one instead of waiting for a Pulumi `up`. 0 or
     * absent: no pool.
     */
    warmPool: z.strictObject({ size: z.number().int().min(0).max(16) }).optional(),
    /**
     * `{protocol: "openai-chat", port}`: the image speaks Sympozium's openai-chat session contract
     * instead of our adapter's (issue 41; contracts/session-spec.ts SessionProtocol). Absent: ours.
     */
    session: SessionProtocol.optional(),
  })
  .superRefine((spec, ctx) => {
    // An openai-chat harness backs sessions, and nothing is exec'd in it (start.mode none).
    if (spec.session && spec.contract !== "v1alpha2")
      ctx.addIssue({
        code: "custom",
        path: ["contract"],
        message:
          "must be v1alpha2 with session: an openai-chat harness backs sessions (v1alpha1 runtimes are one-shot)",
      });
    if (spec.session && spec.agent)
      ctx.addIssue({
        code: "custom",
        path: ["agent"],
        message:
          "must be absent with session: nothing is executed in an openai-chat harness, the runner talks to its port",
      });
  });
export type AgentRuntimeSpec = z.infer<typeof AgentRuntimeSpec>;

/** Set by the server on every read from its configuration; ignored on input. */
export const AgentRuntimeStatus = z.object({
  /** Only approved runtimes may be provisioned. */
  approved: z.boolean(),
  /** Why (not) approved, e.g. the registry that is not in the approved list. */
  message: z.string(),
});
export type AgentRuntimeStatus = z.infer<typeof AgentRuntimeStatus>;

export const AgentRuntime = z.strictObject({
  apiVersion: z.literal(API_VERSION),
  kind: z.literal("AgentRuntime"),
  metadata: ObjectMeta,
  spec: AgentRuntimeSpec,
  status: AgentRuntimeStatus.optional(),
});
export type AgentRuntime = z.infer<typeof AgentRuntime>;
export type AgentRuntimeInput = z.input<typeof AgentRuntime>;

const EnvName = z.string().regex(/^[A-Z_][A-Z0-9_]*$/, "must be an environment variable name (A-Z, 0-9, _)");

/**
 * One provider credential the Agent allows its sessions to receive: a literal `value`, or a
 * `secretRef` naming an environment variable of the server process that holds it (resolved at
 * provision time, so the manifest never carries the secret).
 */
export const AgentCredential = z
  .strictObject({
    /** The variable name the adapter sees, e.g. OPENAI_API_KEY. */
    name: EnvName,
    value: z.string().min(1).max(4096).optional(),
    secretRef: z.strictObject({ env: EnvName }).optional(),
  })
  .refine((c) => (c.value === undefined) !== (c.secretRef === undefined), {
    message: "exactly one of value or secretRef",
  });
export type AgentCredential = z.infer<typeof AgentCredential>;

const credentialList = <T extends z.ZodType<{ name: string }>>(credential: T) =>
  z
    .array(credential)
    .max(32)
    .default([])
    .refine((list) => new Set(list.map((c) => c.name)).size === list.length, {
      message: "credential names must be unique",
    });

/**
 * An Agent's budgets, enforced by the model gateway outside the session (runner/gateway/): over
 * one, the agent's model call gets 429 with a message a person understands, and the session an
 * event. Both optional; absent: no limit.
 */
export const AgentLimits = z.strictObject({
  /** Model tokens (input + output) the Agent's sessions may use per UTC day, as the provider counts them. */
  tokensPerDay: z.number().int("must be a whole number").min(1).max(1_000_000_000_000).optional(),
  /** Model calls the Agent's sessions may make per minute. */
  requestsPerMinute: z.number().int("must be a whole number").min(1).max(1_000_000).optional(),
});
export type AgentLimits = z.infer<typeof AgentLimits>;

export const AgentSpec = z.strictObject({
  /** An AgentRuntime in the Agent's namespace. */
  runtimeRef: DnsLabel,
  /** The Agent is the sole authority on which credentials a session may receive. */
  credentials: credentialList(AgentCredential),
  model: z
    .strictObject({
      /** OpenAI-compatible endpoint, e.g. http://10.213.0.1:11434/v1 */
      baseUrl: z.url({ protocol: /^https?$/, error: "must be an http:// or https:// URL" }),
      name: z.string().min(1).max(256),
      /**
       * The model names the gateway lets a session ask for; absent: any. `name` is what the
       * session is configured with, so it belongs in the list.
       */
      allowedModels: z.array(z.string().min(1).max(256)).min(1).max(64).optional(),
    })
    // On the model object, not on AgentSpec: AgentView and AgentWrite extend AgentSpec, and zod
    // refuses to extend an object that carries a refinement.
    .refine((model) => model.allowedModels === undefined || model.allowedModels.includes(model.name), {
      path: ["allowedModels"],
      message:
        "must contain model.name: the session is configured with that model, and the gateway would refuse every call it makes",
    })
    .optional(),
  /** Budgets the model gateway enforces for all of the Agent's sessions and runs. */
  limits: AgentLimits.optional(),
  /** Destinations the session may reach (the model endpoint at least). */
  egress: z.array(EgressRule).max(32).default([]),
  /**
   * MCPServers of the Agent's namespace its sessions may use, through the runner's gateway only
   * (contracts/mcp.ts); each may narrow the server's tool lists, never widen them.
   */
  mcpServers: AgentMcpServers.optional(),
  /** SkillPacks in the Agent's namespace its sessions get at `/skills/<pack>/<skill>.md` (issue 39). */
  skills: AgentSkills.optional(),
});
export type AgentSpec = z.infer<typeof AgentSpec>;

export const Agent = z.strictObject({
  apiVersion: z.literal(API_VERSION),
  kind: z.literal("Agent"),
  metadata: ObjectMeta,
  spec: AgentSpec,
});
export type Agent = z.infer<typeof Agent>;
export type AgentInput = z.input<typeof Agent>;

/**
 * An Agent as the API answers it (GET, list, PUT, DELETE): credentials are write-only, so a
 * literal `value` is never returned; `valueSet: true` says one is stored (issue 17).
 */
export const AgentView = Agent.extend({
  spec: AgentSpec.extend({
    credentials: z.array(
      z.strictObject({
        name: EnvName,
        valueSet: z.literal(true).optional(),
        secretRef: z.strictObject({ env: EnvName }).optional(),
      }),
    ),
  }),
});
export type AgentView = z.infer<typeof AgentView>;

/**
 * A credential as a client writes it (`PUT …/agents/{name}`): a new `value`, a `secretRef`, or
 * `valueSet: true` — keep the value stored under this name, so a document read with GET (which
 * never carries the value) can be written back unchanged.
 */
export const AgentCredentialWrite = z
  .strictObject({
    name: EnvName,
    value: z.string().min(1).max(4096).optional(),
    secretRef: z.strictObject({ env: EnvName }).optional(),
    valueSet: z.literal(true).optional(),
  })
  .refine((c) => [c.value, c.secretRef, c.valueSet].filter((x) => x !== undefined).length === 1, {
    message:
      "exactly one of value, secretRef or valueSet: true (valueSet keeps the value already stored under this name)",
  });
export type AgentCredentialWrite = z.infer<typeof AgentCredentialWrite>;

/** An Agent as `PUT` takes it: AgentView's credentials are accepted back (AgentCredentialWrite). */
export const AgentWrite = Agent.extend({
  spec: AgentSpec.extend({ credentials: credentialList(AgentCredentialWrite) }),
});
export type AgentWrite = z.infer<typeof AgentWrite>;

/** Markdown skills for an Agent's sessions (contracts/skill-pack.ts). */
export const SkillPack = z.strictObject({
  apiVersion: z.literal(API_VERSION),
  kind: z.literal("SkillPack"),
  metadata: ObjectMeta,
  spec: SkillPackSpec,
});
export type SkillPack = z.infer<typeof SkillPack>;

/** The kinds served under `/v1/namespaces/{ns}/{plural}`, keyed by plural. */
export const ResourceKinds = {
  agentruntimes: { kind: "AgentRuntime", schema: AgentRuntime },
  agents: { kind: "Agent", schema: Agent },
  mcpservers: { kind: "MCPServer", schema: MCPServer },
  skillpacks: { kind: "SkillPack", schema: SkillPack },
} as const;
export type ResourcePlural = keyof typeof ResourceKinds;
export type ResourceKind = (typeof ResourceKinds)[ResourcePlural]["kind"];
export type Resource = AgentRuntime | Agent | MCPServer | SkillPack;

/** `name` (namespace `default`) or `namespace/name`, as in the RPCs' `agent_ref`. */
export function parseAgentRef(ref: string): { namespace: string; name: string } {
  const slash = ref.indexOf("/");
  return slash < 0
    ? { namespace: "default", name: ref }
    : { namespace: ref.slice(0, slash), name: ref.slice(slash + 1) };
}

/** The canonical `namespace/name` form, so `a` and `default/a` are one account. */
export function canonicalAgentRef(ref: string): string {
  const { namespace, name } = parseAgentRef(ref);
  return `${namespace}/${name}`;
}
