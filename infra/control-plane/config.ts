/**
 * The control-plane program's configuration (Pulumi config namespace `agent-sessions-control-plane`):
 * one schema, defaults and units in it, read once when the program runs (never at import).
 * README.md beside this file documents every key.
 */
import * as pulumi from "@pulumi/pulumi";
import { z } from "zod";
import { parseOrThrow } from "../../contracts/errors.ts";
import { DigestPinnedImage, DnsLabel } from "../../contracts/session-spec.ts";

export const CONFIG_NAMESPACE = "agent-sessions-control-plane";

/** Kubernetes CPU quantity: "500m", "1", "1.5". */
const Cpu = z.string().regex(/^\d+(\.\d+)?m?$/, "must be a CPU quantity such as 500m or 1");
/** Kubernetes storage quantity with a binary suffix: "512Mi", "1Gi". */
const Storage = z.string().regex(/^\d+(Mi|Gi|Ti)$/, "must be a quantity such as 512Mi or 1Gi");

export const PodResources = z.object({
  /** CPU limit. */
  cpu: Cpu,
  /**
   * CPU request: what the scheduler reserves. Small by default: the control plane idles most of
   * the time and the node's CPU is for the sessions; it bursts up to `cpu` when a stack runs.
   */
  cpuRequest: Cpu.default("100m"),
  /** Memory request and limit, MiB. */
  memoryMiB: z.number().int().min(64).max(65536),
});
export type PodResources = z.infer<typeof PodResources>;

export const ControlPlaneConfig = z
  .object({
    /** The control-plane image (server and runner), pinned by digest. */
    image: DigestPinnedImage,
    /** Namespace of the server and the runner. @default "agent-sessions-system" */
    namespace: DnsLabel.default("agent-sessions-system"),
    /** Namespace of the session objects; the only one the runner's Role covers. @default "agent-sessions" */
    sessionsNamespace: DnsLabel.default("agent-sessions"),
    /**
     * Create (and on destroy delete, with every session object in it) the sessions namespace.
     * false: it exists already and outlives this stack. @default true
     */
    createSessionsNamespace: z.boolean().default(true),
    /**
     * Protect what cannot be recreated: the server's and the runner's volumes (store, session
     * stacks' state) and the runner's passphrase Secret. `pulumi destroy` then stops at them until
     * `pulumi state unprotect`. @default false
     */
    protectData: z.boolean().default(false),
    /** StorageClass of the server's and the runner's volumes. @default the cluster's default class */
    storageClassName: z.string().min(1).optional(),
    /**
     * Server replicas (issue 20). More than one needs the PostgreSQL store: the stack's secret
     * config `databaseUrl` (`pulumi config set --secret databaseUrl postgres://…`); the replicas
     * then share it, and runners attach to any of them through the Service. @default 1
     */
    serverReplicas: z.number().int().min(1).max(50).default(1),
    /** Size of the server's data volume (SQLite store; none when `databaseUrl` is set). @default "1Gi" */
    serverStorage: Storage.default("1Gi"),
    /** Size of the runner's volume (session stacks' Pulumi state and settings). @default "1Gi" */
    runnerStorage: Storage.default("1Gi"),
    /** Sessions the runner accepts at most (its hello to the server). @default 100 */
    runnerCapacity: z.number().int().positive().default(100),
    /** The runner's name towards the server; stable, so a replaced pod reattaches as the same runner. @default "<namespace>-runner" */
    runnerName: z.string().min(1).optional(),
    /** Image of AgentRuntime `default/reference`, registered by the server on first start. @default none */
    referenceImage: DigestPinnedImage.optional(),
    /**
     * The runner's git image (AGENT_SESSIONS_GIT_IMAGE: sh, git, tar, find): each session pod gets
     * a `workspace` sidecar of it for the files API, repository seeds and diffs. @default none
     * (those answer UNIMPLEMENTED, and a repository workstream fails to provision)
     */
    gitImage: DigestPinnedImage.optional(),
    /** Port of the server's HTTP API inside the cluster. @default 8787 */
    serverPort: z.number().int().min(1024).max(65535).default(8787),
    /** @default {cpu: "500m", cpuRequest: "100m", memoryMiB: 512} */
    serverResources: PodResources.default({ cpu: "500m", cpuRequest: "100m", memoryMiB: 512 }),
    /**
     * The runner runs the Pulumi CLI, the Kubernetes provider and a Node program per stack operation.
     * @default {cpu: "1", cpuRequest: "100m", memoryMiB: 2048}
     */
    runnerResources: PodResources.default({ cpu: "1", cpuRequest: "100m", memoryMiB: 2048 }),
  })
  .refine((c) => c.namespace !== c.sessionsNamespace, {
    message:
      "namespace and sessionsNamespace must differ: session pods never share the control plane's namespace",
    path: ["sessionsNamespace"],
  });
export type ControlPlaneConfig = z.infer<typeof ControlPlaneConfig>;
export type ControlPlaneConfigInput = z.input<typeof ControlPlaneConfig>;

/**
 * The stack's secret `databaseUrl` (AGENT_SESSIONS_DATABASE_URL of every server replica), kept
 * secret end to end: it reaches the pods only through a Kubernetes Secret.
 */
export function readDatabaseUrl(
  config = new pulumi.Config(CONFIG_NAMESPACE),
): pulumi.Output<string> | undefined {
  return config.getSecret("databaseUrl");
}

/** Reads and validates the stack's config. */
export function readControlPlaneConfig(config = new pulumi.Config(CONFIG_NAMESPACE)): ControlPlaneConfig {
  const raw: Record<string, unknown> = {
    image: config.get("image"),
    namespace: config.get("namespace"),
    sessionsNamespace: config.get("sessionsNamespace"),
    createSessionsNamespace: config.getBoolean("createSessionsNamespace"),
    protectData: config.getBoolean("protectData"),
    storageClassName: config.get("storageClassName"),
    serverStorage: config.get("serverStorage"),
    serverReplicas: config.getNumber("serverReplicas"),
    runnerStorage: config.get("runnerStorage"),
    runnerCapacity: config.getNumber("runnerCapacity"),
    runnerName: config.get("runnerName"),
    referenceImage: config.get("referenceImage"),
    gitImage: config.get("gitImage"),
    serverPort: config.getNumber("serverPort"),
    serverResources: config.getObject("serverResources"),
    runnerResources: config.getObject("runnerResources"),
  };
  const present = Object.fromEntries(Object.entries(raw).filter(([, v]) => v !== undefined));
  return parseOrThrow(ControlPlaneConfig, present, `${CONFIG_NAMESPACE} config`);
}
