/** Wires a runner from its config: the Docker driver over the stacks library. */
import { StackManager } from "../stacks/index.ts";
import { parseRunnerConfig, type RunnerConfig } from "./config.ts";
import { DockerDriver } from "./docker.ts";
import { jsonLog, Runner } from "./runner.ts";
import { dockerClient } from "../infra/docker-provider/provider.ts";

export async function startRunner(config: RunnerConfig): Promise<Runner> {
  if (config.engine !== "docker") throw new Error(`engine ${config.engine} has no driver in this runner yet`);
  const stacks = await StackManager.create(
    { dataDir: config.dataDir, env: { DOCKER_HOST: config.dockerHost } },
    { log: jsonLog("stacks") },
  );
  const runner = new Runner(config, new DockerDriver(dockerClient(config.dockerHost), stacks));
  await runner.start();
  return runner;
}

export { parseRunnerConfig };
