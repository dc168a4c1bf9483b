/** Wires a runner from its config: the engine's driver over the stacks library. */
import { StackManager } from "../stacks/index.ts";
import { parseRunnerConfig, type RunnerConfig } from "./config.ts";
import { createDockerDriver } from "./docker/index.ts";
import { dockerBridgeAddress } from "./docker/session-host.ts";
import type { EngineDriver } from "./engine/driver.ts";
import { createKubernetesDriver } from "./kubernetes/index.ts";
import { jsonLog, Runner, type RunnerOptions } from "./runner.ts";
import { explainStartFailure } from "./engine/start-failure.ts";

/**
 * `options.dial`: `serve`'s embedded runner reaches its server in process (contracts/runner-channel.ts).
 * A dependency it lacks (the Pulumi CLI, the Docker engine) is FAILED_PRECONDITION naming it.
 */
export async function startRunner(config: RunnerConfig, options: RunnerOptions = {}): Promise<Runner> {
  try {
    return await wireRunner(config, options);
  } catch (error) {
    throw explainStartFailure(error, config);
  }
}

async function wireRunner(config: RunnerConfig, options: RunnerOptions): Promise<Runner> {
  const stacks = await StackManager.create(
    {
      dataDir: config.dataDir,
      // The engine's own address for the providers: DOCKER_HOST, or the kubeconfig the
      // Kubernetes provider reads (KUBECONFIG; in a pod its service account).
      env:
        config.engine === "docker"
          ? { DOCKER_HOST: config.dockerHost }
          : config.kubeconfig
            ? { KUBECONFIG: config.kubeconfig }
            : {},
    },
    { log: jsonLog("stacks") },
  );
  const settings = (engine: string) => ({
    // Stop/resume/heal act on the engine at once and record the stack afterwards (runner/engine/fast-path.ts).
    fastPath: config.fastPath,
    // A first create made at once too (AGENT_SESSIONS_FAST_CREATE=off keeps create on the full path).
    fastCreate: config.fastCreate,
    log: jsonLog(engine),
  });
  let driver: EngineDriver;
  switch (config.engine) {
    case "docker":
      driver = createDockerDriver(config, stacks, settings("docker"));
      break;
    case "kubernetes":
      driver = createKubernetesDriver(config, stacks, settings("kubernetes"));
      break;
    default: {
      const never: never = config.engine;
      throw new Error(`unknown engine ${String(never)}`);
    }
  }
  // The model gateway's address: the setting, else on Docker the bridge sessions reach the host by.
  const gatewayHost =
    config.gateway.host ??
    (config.engine === "docker" ? await dockerBridgeAddress(config.dockerHost) : undefined);
  const runner = new Runner(
    { ...config, gateway: { ...config.gateway, host: gatewayHost } },
    driver,
    jsonLog("runner"),
    options,
  );
  await runner.start();
  return runner;
}

export { parseRunnerConfig };
