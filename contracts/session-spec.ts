import { createHash } from "node:crypto";
import { z } from "zod";
import { CONTROL_PLANE_PORTS, EgressRule } from "./egress.ts";
import { SeedRepo } from "./workspace-repo.ts";

export { EgressRule };

/**
 * The spec of one session stack: what `infra/program.ts` declares, read from stack config.
 * Validated here before any Pulumi call, so bad input never reaches the engine.
 */

/**
 * RFC 1123 DNS label (the names Kubernetes and Docker both accept) without `--`: `--` separates
 * namespace and name in stack and workload names, so it may not occur inside either.
 */
export const DnsLabel = z
  .string()
  .min(1)
  .max(63)
  .regex(
    /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/,
    "must be a DNS label: lowercase letters, digits and '-', starting and ending alphanumeric",
  )
  .refine((s) => !s.includes("--"), "must not contain '--' (it separates namespace and name)");

/** `registry/repository@sha256:<64 hex>`; a tag is not a pin. */
export const DigestPinnedImage = z
  .string()
  .regex(
    /^[a-z0-9.:_/-]+@sha256:[a-f0-9]{64}$/,
    "image must be pinned by digest (repository@sha256:<64 hex>), not by tag",
  );

export const RuntimeContract = z.enum(["v1alpha1", "v1alpha2"]);
export type RuntimeContract = z.infer<typeof RuntimeContract>;

/**
 * A runtime that speaks Sympozium's `openai-chat` session contract instead of our adapter's
 * (issue 41): its image serves `GET /healthz` and `POST /v1/chat/completions` on `port`, and is
 * started with SYMPOZIUM_HARNESS_CONTRACT_VERSION=v1alpha2. The runner probes and relays to it
 * in that contract (runner/relay/openai-chat-exchange.ts); everything else about a session is
 * the same.
 */
export const SessionProtocolName = z.literal("openai-chat", {
  error: 'must be "openai-chat" (leave session out for our adapter contract)',
});
export const SessionProtocol = z.strictObject({
  protocol: SessionProtocolName,
  /** The harness runs as a non-root user with no capabilities: it cannot listen below 1024. */
  port: z
    .number({ error: "must be an integer from 1024 to 65535" })
    .int({ error: "must be an integer from 1024 to 65535" })
    .min(1024, { error: "must be an integer from 1024 to 65535" })
    .max(65535, { error: "must be an integer from 1024 to 65535" }),
});
export type SessionProtocol = z.infer<typeof SessionProtocol>;

/** The variable an openai-chat harness is started with, and its value. */
export const HARNESS_CONTRACT_ENV = {
  name: "SYMPOZIUM_HARNESS_CONTRACT_VERSION",
  value: "v1alpha2",
} as const;

/** An argv: the executable, then its arguments. */
export const AgentCommand = z.array(z.string().min(1).max(4096)).min(1).max(64);
export type AgentCommand = z.infer<typeof AgentCommand>;

export const Engine = z.enum(["docker", "kubernetes"]);
export type Engine = z.infer<typeof Engine>;

export const SessionResources = z.object({
  /** Kubernetes CPU quantity, e.g. "500m". */
  cpu: z
    .string()
    .regex(/^\d+(\.\d+)?m?$/)
    .default("500m"),
  /** Memory in MiB. */
  memoryMiB: z.number().int().min(32).max(65536).default(512),
  pids: z.number().int().min(16).max(32768).default(512),
  /** Session volume size in MiB (Kubernetes PVC request). */
  storageMiB: z.number().int().min(16).default(1024),
});
export type SessionResources = z.infer<typeof SessionResources>;

/**
 * What a runner is told of a snapshot's storage (contracts/session-snapshot.ts): its name and who it belongs to (labels on the
 * engine object, so a restarted runner finds it), and the engine-specific placement a Kubernetes
 * PVC needs (the sessions namespace and storage class of the session spec).
 */
export const SnapshotStorage = z.object({
  storage: z.string().regex(/^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/, "a DNS label"),
  namespace: DnsLabel,
  name: DnsLabel,
  kubernetes: z
    .object({
      namespace: DnsLabel.default("agent-sessions"),
      storageClassName: z.string().optional(),
    })
    .optional(),
});
export type SnapshotStorage = z.infer<typeof SnapshotStorage>;

/**
 * The config of a snapshot's stack (`agent-sessions:snapshot`, stack `snapshotStackName`): the
 * root program then declares only the snapshot's storage (infra/docker/snapshot.ts,
 * infra/kubernetes/snapshot.ts) instead of a session.
 */
export const SnapshotStackSpec = z.object({
  engine: Engine,
  target: SnapshotStorage,
  /** A PVC's storage request (Kubernetes). @default the session volume's default, 1Gi */
  storageRequest: z
    .string()
    .regex(/^[0-9]+(Ki|Mi|Gi|Ti)?$/, "a quantity such as 1Gi")
    .optional(),
});
export type SnapshotStackSpec = z.infer<typeof SnapshotStackSpec>;

/**
 * One skill as a session spec carries it (`skills` below; the SkillPack kind: contracts/skill-pack.ts): its pack, its
 * name and what the runtime shows the agent. Mounted at `/skills/<pack>/<name>.md`.
 */
export const SessionSkill = z.strictObject({
  pack: DnsLabel,
  name: DnsLabel,
  description: z.string().max(1024),
  content: z.string().min(1),
});
export type SessionSkill = z.infer<typeof SessionSkill>;

export const SessionSpec = z.object({
  namespace: DnsLabel,
  name: DnsLabel,
  engine: Engine,
  image: DigestPinnedImage,
  contract: RuntimeContract.refine((c) => c === "v1alpha2", {
    message:
      "the runtime declares contract v1alpha1 (one-shot); sessions need a runtime that declares v1alpha2",
  }),
  streaming: z.boolean().default(false),
  /** 1 = running, 0 = stopped (the volume stays). */
  replicas: z.union([z.literal(0), z.literal(1)]).default(1),
  idleTimeoutSeconds: z.number().int().nonnegative("idleTimeout must not be negative").default(900),
  resources: SessionResources.default(SessionResources.parse({})),
  /** Allowed model endpoints; DNS is added on Kubernetes. */
  egress: z.array(EgressRule).max(32).default([]),
  /**
   * What the runner executes in the workload for a seed-004 agent session (the runtime's
   * `spec.agent.command`), kept with the image it belongs to. Not declared by the stack.
   * Absent: the reference agent.
   */
  agentCommand: AgentCommand.optional(),
  /** The runtime's `spec.session`: absent, our adapter contract on ADAPTER_PORT. */
  session: SessionProtocol.optional(),
  /**
   * Ports no egress may open, on any address: the server's own and the control plane's. The
   * runner hands them to the policy pack on every `up` (stacks/policy-pack-config.ts).
   */
  forbiddenEgressPorts: z
    .array(z.number().int().min(1).max(65535))
    .max(64)
    .default(() => [...CONTROL_PLANE_PORTS]),
  /**
   * The repository the workspace volume is seeded from, once (contracts/workspace-repo.ts). A
   * credential is named, never carried: its value comes with the provision's credentials.
   */
  repo: SeedRepo.optional(),
  /**
   * A fork (HarnessSession spec.source.snapshotRef): the snapshot storage the workspace volume is
   * seeded from, once, at its first provision, before any agent starts (contracts/session-snapshot.ts).
   * The provision answers `seeded_snapshot` when it copied it; the server sends it no more after.
   */
  seedSnapshot: SnapshotStorage.optional(),
  /**
   * The Agent's skills (its SkillPacks', in order), mounted read-only at `/skills/<pack>/<name>.md`
   * (contracts/skill-pack.ts). Absent when it has none: a spec without skills is what it was
   * before (its stack and spec hash unchanged).
   */
  skills: z.array(SessionSkill).min(1).max(64).optional(),
  /**
   * A HarnessSession's declared ports (contracts/session-ports.ts checks them): the runner relays
   * to these only, and on Kubernetes the Service exposes them and the NetworkPolicy admits them
   * from the runner. Absent (not empty) when none, so a session without ports keeps its stack
   * config and spec hash.
   */
  ports: z
    .array(z.object({ port: z.number().int().min(1024).max(65535), name: DnsLabel }))
    .max(8)
    .optional(),
  /** Plain environment for the adapter (model URL, model name). Credentials go in stack secrets. */
  env: z.record(z.string().regex(/^[A-Z_][A-Z0-9_]*$/), z.string().max(4096)).default({}),
  kubernetes: z
    .object({
      /** Namespace the session objects live in. */
      namespace: DnsLabel.default("agent-sessions"),
      /** Labels of the runner pods: the only ingress a session pod accepts. */
      runnerSelector: z.record(z.string(), z.string()).default({ "agent-sessions.dev/component": "runner" }),
      /**
       * Labels of the namespace the runner pods run in, when that is not the sessions namespace
       * (a control plane of its own): the ingress peer is then those pods in those namespaces.
       * Unset: the runner pods are looked for in the sessions namespace.
       */
      runnerNamespaceSelector: z.record(z.string(), z.string()).optional(),
      storageClassName: z.string().optional(),
      /** CIDR the runner reaches session pods from when it runs outside the cluster (the node). */
      runnerCidr: z.string().optional(),
      /**
       * The image of the pod's `workspace` sidecar (the runner's git image: sh, git, tar, find):
       * the runner seeds, lists, reads, writes, archives and diffs the workspace by exec into it,
       * never into the agent's container. Set by the runner; unset, the pod has no sidecar and the
       * workspace files API answers UNIMPLEMENTED.
       */
      workspaceImage: DigestPinnedImage.optional(),
    })
    .default({ namespace: "agent-sessions", runnerSelector: { "agent-sessions.dev/component": "runner" } }),
});
export type SessionSpec = z.infer<typeof SessionSpec>;
export type SessionSpecInput = z.input<typeof SessionSpec>;

/**
 * Stack name of a session: namespace + session name. Both are DNS labels, so `--` cannot occur
 * inside either and the mapping is reversible.
 */
export function sessionStackName(namespace: string, name: string): string {
  return `${DnsLabel.parse(namespace)}--${DnsLabel.parse(name)}`;
}

/**
 * Name of engine objects of a session: short, stable, a DNS label, and one session's only.
 * `as-<ns>-<name>` when the namespace has no `-` (as before, so those sessions keep their
 * objects), else `as-<ns>--<name>`: neither part contains `--`, so the first form never holds
 * `--` and the second exactly once, and no two sessions share a name
 * (`("team", "x-foo")` → `as-team-x-foo`, `("team-x", "foo")` → `as-team-x--foo`). Over 63
 * characters: a readable prefix and 64 bits of a SHA-256 of the full name.
 */
export function workloadName(namespace: string, name: string): string {
  const base = namespace.includes("-") ? `as-${namespace}--${name}` : `as-${namespace}-${name}`;
  if (base.length <= 63) return base;
  // `as--` starts no name of the two forms above (a namespace starts alphanumeric), so a hashed
  // name never equals an unhashed one; two hashed ones only on a 64-bit SHA-256 collision.
  const hash = createHash("sha256").update(base).digest("hex").slice(0, 16);
  const head = base.slice(3, 63 - 4 - hash.length - 1).replace(/-+$/, "");
  return `as--${head}-${hash}`;
}

/** Stack outputs every session program exports. */
export const SessionOutputs = z.object({
  resolvedImageDigest: z.string(),
  workloadName: z.string(),
  /** host:port the runner reaches the adapter at (empty while scaled to 0 on Docker). */
  endpoint: z.string(),
  volumeName: z.string(),
  replicas: z.number(),
});
export type SessionOutputs = z.infer<typeof SessionOutputs>;

/** Config keys of the session program (project `agent-sessions`). */
export const ConfigKeys = {
  spec: "agent-sessions:spec",
  /** Secret: JSON map of credential env name → value (the Agent's allowlist only). */
  credentials: "agent-sessions:credentials",
  /** Secret: the per-session adapter token the runner holds. */
  adapterToken: "agent-sessions:adapterToken",
  /** Secret: the stack's random key of the credential hash its state keeps (written once, kept). */
  stateHashKey: "agent-sessions:stateHashKey",
  /** A snapshot's stack: its SnapshotStackSpec (then the program declares only that storage). */
  snapshot: "agent-sessions:snapshot",
} as const;

/**
 * Set (to "1") in the environment of an `up` that records what the runner's fast path already
 * made (stacks/stack-manager.ts, recordOnly): the session providers adopt the workload the engine
 * holds and never make one (infra/docker/provider/provider.ts).
 */
export const RECORD_ONLY_ENV = "AGENT_SESSIONS_RECORD_ONLY";

/**
 * Labels of a namespace session pods run in: Pod Security admission (Kubernetes >= 1.23) refuses
 * any pod there that the "restricted" profile forbids (privileged, hostPath, root, …), so a pod not
 * made by the session program cannot run looser than the session pods, which meet it.
 */
export const SESSIONS_NAMESPACE_POD_SECURITY = {
  "pod-security.kubernetes.io/enforce": "restricted",
  "pod-security.kubernetes.io/enforce-version": "latest",
} as const;

export const LABEL_PREFIX = "agent-sessions.dev";
export const Labels = {
  managedBy: `${LABEL_PREFIX}/managed-by`,
  session: `${LABEL_PREFIX}/session`,
  namespace: `${LABEL_PREFIX}/namespace`,
  component: `${LABEL_PREFIX}/component`,
} as const;
