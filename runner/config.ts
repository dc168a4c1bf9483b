import { hostname } from "node:os";
import { z } from "zod";
import { KubernetesRunnerConfig, kubernetesRunnerSource } from "./kubernetes-config.ts";
import { RunnerLabels, RunnerName } from "../contracts/runners.ts";

/** The runner's configuration: one schema, defaults and units in it, parsed at start, never at import. */
export const RunnerConfig = z.object({
  serverUrl: z.string().url(),
  /** The runner token (not the admin token). */
  token: z.string().min(16),
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
    name: source.AGENT_SESSIONS_RUNNER_NAME,
    engine: source.AGENT_SESSIONS_ENGINE,
    dataDir: source.AGENT_SESSIONS_RUNNER_DATA_DIR ?? source.AGENT_SESSIONS_DATA_DIR,
    capacity: source.AGENT_SESSIONS_RUNNER_CAPACITY
      ? Number(source.AGENT_SESSIONS_RUNNER_CAPACITY)
      : undefined,
    labels: source.AGENT_SESSIONS_RUNNER_LABELS
      ? parseLabelPairs([source.AGENT_SESSIONS_RUNNER_LABELS])
      : undefined,
    dockerHost: source.DOCKER_HOST,
    kubernetes: kubernetesRunnerSource(source),
    ...Object.fromEntries(Object.entries(overrides).filter(([, v]) => v !== undefined)),
  });
}
