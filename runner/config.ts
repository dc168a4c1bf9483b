import { hostname } from "node:os";
import { z } from "zod";
import { KubernetesRunnerConfig, kubernetesRunnerSource } from "./kubernetes/config.ts";
import { RunnerLabels, RunnerName } from "../contracts/runners.ts";
import { DigestPinnedImage } from "../contracts/session-spec.ts";
import { DEFAULT_OUTPUT_LIMITS } from "./sessions/agent-stdout.ts";

/** Bounds on each agent's stdout (runner/sessions/agent-stdout.ts). */
export const AgentOutputConfig = z.object({
  /** AGENT_SESSIONS_AGENT_LINE_MAX_BYTES: a longer line is dropped with an error frame. @default 262144 */
  maxLineBytes: z.coerce
    .number()
    .int()
    .min(1024)
    .max(4 * 1024 * 1024)
    .default(DEFAULT_OUTPUT_LIMITS.maxLineBytes),
  /** AGENT_SESSIONS_AGENT_OUTPUT_BYTES_PER_SECOND: per session; more is throttled. @default 4194304 */
  bytesPerSecond: z.coerce.number().int().positive().default(DEFAULT_OUTPUT_LIMITS.bytesPerSecond),
  /** AGENT_SESSIONS_AGENT_FRAMES_PER_SECOND: per session; more is throttled. @default 2000 */
  framesPerSecond: z.coerce.number().int().positive().default(DEFAULT_OUTPUT_LIMITS.framesPerSecond),
});

/** A host on this machine: 127.0.0.0/8, ::1 or localhost. */
export function isLoopbackHost(hostname: string): boolean {
  const host = hostname.replace(/^\[|\]$/g, "").toLowerCase();
  return host === "localhost" || host === "::1" || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(host);
}

/**
 * The link carries credentials and every session's provisions: off this machine only over TLS
 * (`https://` or `wss://`). Plain `http://`/`ws://` to another host only with `allowInsecure`.
 */
export function insecureServerUrl(serverUrl: string): string | undefined {
  const url = new URL(serverUrl);
  if (url.protocol === "https:" || url.protocol === "wss:") return undefined;
  if (url.protocol !== "http:" && url.protocol !== "ws:")
    return `the server URL must be http(s):// or ws(s)://, got ${url.protocol}`;
  if (isLoopbackHost(url.hostname)) return undefined;
  return `the server URL ${url.origin} is not on this machine and not TLS: use https:// or wss:// (AGENT_SESSIONS_RUNNER_ALLOW_INSECURE=true allows plain ws:// in a test bed)`;
}

/** The runner's configuration: one schema, defaults and units in it, parsed at start, never at import. */
export const RunnerConfig = z
  .object({
    serverUrl: z.string().url(),
    /**
     * The runner token (registers this runner's name once; the server then issues the runner its
     * own credential, kept in `<dataDir>/runner-credential`), or a credential an admin issued for it.
     */
    token: z.string().min(16),
    /** Allow plain `ws://` to a server that is not on loopback (a test bed). @default false */
    allowInsecure: z.boolean().default(false),
    /** Its identity on the server (drain and undrain name it); keep it stable across restarts. */
    name: RunnerName.default(hostname()),
    engine: z.enum(["docker", "kubernetes"]).default("docker"),
    /** Where stacks keep their file:// backend and passphrase. */
    dataDir: z.string().min(1),
    /** How many workspaces placement puts on this runner at most. */
    capacity: z.number().int().positive().default(100),
    /** What placement selects on (`runnerSelector` of a HarnessSession, `runner_selector` of an RPC). */
    labels: RunnerLabels.default({}),
    dockerHost: z.string().default("unix:///var/run/docker.sock"),
    /** The Kubernetes engine's settings (kubernetes-config.ts): sessions namespace, NetworkPolicy peer. */
    kubernetes: KubernetesRunnerConfig.default({ namespace: "agent-sessions" }),
    agentOutput: AgentOutputConfig.default(DEFAULT_OUTPUT_LIMITS),
    /**
     * AGENT_SESSIONS_GIT_IMAGE: a digest-pinned image with git and /bin/sh that seeds workspaces
     * from repositories and diffs them (runner/docker/repo-seed.ts). Unset: a repository workstream
     * fails to provision with FAILED_PRECONDITION.
     */
    gitImage: DigestPinnedImage.optional(),
  })
  .superRefine((config, ctx) => {
    const insecure = config.allowInsecure ? undefined : insecureServerUrl(config.serverUrl);
    if (insecure) ctx.addIssue({ code: "custom", path: ["serverUrl"], message: insecure });
  });
export type RunnerConfig = z.infer<typeof RunnerConfig>;

/**
 * `key=value` pairs as labels: from `--label key=value` (repeated) or
 * `AGENT_SESSIONS_RUNNER_LABELS="zone=a,gpu=true"`. Keys and values are checked by the config schema.
 */
export function parseLabelPairs(pairs: readonly string[]): Record<string, string> {
  const labels: Record<string, string> = {};
  for (const pair of pairs.flatMap((p) => p.split(",")).map((p) => p.trim())) {
    if (pair === "") continue;
    const eq = pair.indexOf("=");
    if (eq <= 0) throw new Error(`a label must be key=value, got "${pair}"`);
    const key = pair.slice(0, eq);
    if (Object.hasOwn(labels, key)) throw new Error(`label ${key} is given twice`);
    labels[key] = pair.slice(eq + 1);
  }
  return labels;
}

export function parseRunnerConfig(
  source: NodeJS.ProcessEnv = process.env,
  overrides: Partial<z.input<typeof RunnerConfig>> = {},
): RunnerConfig {
  return RunnerConfig.parse({
    serverUrl: source.AGENT_SESSIONS_SERVER_URL,
    token: source.AGENT_SESSIONS_RUNNER_TOKEN,
    allowInsecure: source.AGENT_SESSIONS_RUNNER_ALLOW_INSECURE === "true",
    name: source.AGENT_SESSIONS_RUNNER_NAME,
    engine: source.AGENT_SESSIONS_ENGINE,
    dataDir: source.AGENT_SESSIONS_RUNNER_DATA_DIR,
    capacity: source.AGENT_SESSIONS_RUNNER_CAPACITY
      ? Number(source.AGENT_SESSIONS_RUNNER_CAPACITY)
      : undefined,
    labels: source.AGENT_SESSIONS_RUNNER_LABELS
      ? parseLabelPairs([source.AGENT_SESSIONS_RUNNER_LABELS])
      : undefined,
    dockerHost: source.DOCKER_HOST,
    gitImage: source.AGENT_SESSIONS_GIT_IMAGE || undefined,
    kubernetes: kubernetesRunnerSource(source),
    agentOutput: {
      maxLineBytes: source.AGENT_SESSIONS_AGENT_LINE_MAX_BYTES || undefined,
      bytesPerSecond: source.AGENT_SESSIONS_AGENT_OUTPUT_BYTES_PER_SECOND || undefined,
      framesPerSecond: source.AGENT_SESSIONS_AGENT_FRAMES_PER_SECOND || undefined,
    },
    ...Object.fromEntries(Object.entries(overrides).filter(([, v]) => v !== undefined)),
  });
}
