/** Makes the Docker engine's driver from the runner's settings (runner/main.ts picks the engine). */
import { dockerClient } from "../../infra/docker/provider/provider.ts";
import type { StackManager } from "../../stacks/index.ts";
import { join } from "node:path";
import type { DriverSettings } from "../engine/fast-path.ts";
import { DockerDriver } from "./driver.ts";
import { STARTUP_BOOSTS_FILE_NAME, type StartupBoostSettings } from "./startup-boost.ts";

/** The runner's settings the Docker driver reads (runner/config.ts). */
export type DockerDriverConfig = {
  /** The engine's address (DOCKER_HOST). */
  dockerHost: string;
  /** The digest-pinned image a workspace is seeded from a repository with (runner/docker/repo-seed.ts). */
  gitImage?: string | undefined;
  /** AGENT_SESSIONS_STARTUP_CPU_BOOST{,_MS}. @default off */
  startupBoost?: StartupBoostSettings;
  /** Where the boosted containers are kept across restarts. */
  dataDir?: string;
};

export function createDockerDriver(
  config: DockerDriverConfig,
  stacks: StackManager,
  settings: DriverSettings,
): DockerDriver {
  return new DockerDriver(dockerClient(config.dockerHost), stacks, {
    ...settings,
    gitImage: config.gitImage,
    ...(config.startupBoost ? { startupBoost: config.startupBoost } : {}),
    startupBoostFile: config.dataDir ? join(config.dataDir, STARTUP_BOOSTS_FILE_NAME) : undefined,
  });
}
