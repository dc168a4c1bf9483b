import { hostname } from "node:os";
import { z } from "zod";

/** The runner's configuration: one schema, defaults and units in it, parsed at start, never at import. */
export const RunnerConfig = z.object({
  serverUrl: z.string().url(),
  /** The runner token (not the admin token). */
  token: z.string().min(16),
  name: z.string().min(1).default(hostname()),
  engine: z.enum(["docker", "kubernetes"]).default("docker"),
  /** Where stacks keep their file:// backend and passphrase. */
  dataDir: z.string().min(1),
  capacity: z.number().int().positive().default(100),
  labels: z.record(z.string(), z.string()).default({}),
  dockerHost: z.string().default("unix:///var/run/docker.sock"),
});
export type RunnerConfig = z.infer<typeof RunnerConfig>;

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
    dockerHost: source.DOCKER_HOST,
    ...Object.fromEntries(Object.entries(overrides).filter(([, v]) => v !== undefined)),
  });
}
