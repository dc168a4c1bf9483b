/** Wires a runner from its config: the engine's driver over the stacks library. */
import { KubeConfig } from "@kubernetes/client-node";
import { dockerClient } from "../infra/docker/provider/provider.ts";
import { StackManager } from "../stacks/index.ts";
import { parseRunnerConfig, type RunnerConfig } from "./config.ts";
import { DockerDriver } from "./docker/driver.ts";
import type { EngineDriver } from "./engine/driver.ts";
import { KubernetesDriver } from "./kubernetes/driver.ts";
import { jsonLog, Runner, type RunnerOptions } from "./runner.ts";
import { explainStartFailure } from "./start-failure.ts";

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
  let driver: EngineDriver;
  switch (config.engine) {
    case "docker":
      driver = new DockerDriver(dockerClient(config.dockerHost), stacks, {
        // Stop/resume act on the engine at once and record the stack afterwards (runner/docker/driver.ts).
        fastPath: config.fastPath,
        // A first create made at once too (AGENT_SESSIONS_FAST_CREATE=off keeps create on the full path).
        fastCreate: config.fastCreate,
        log: jsonLog("docker"),
        gitImage: config.gitImage,
      });
      break;
    case "kubernetes": {
      // KUBECONFIG when set, else ~/.kube/config, else the in-cluster service account.
      const kc = new KubeConfig();
      kc.loadFromDefault();
      driver = new KubernetesDriver(kc, stacks, {
        ...config.kubernetes,
        // The pods' workspace sidecar: files API, repo seed and diff (runner/kubernetes/workspace-files.ts).
        workspaceImage: config.gitImage,
        // Stop/resume/heal act on the cluster at once and record the stack afterwards (runner/kubernetes/driver.ts).
        fastPath: config.fastPath,
        // A first create made at once too (AGENT_SESSIONS_FAST_CREATE=off keeps create on the full path).
        fastCreate: config.fastCreate,
        log: jsonLog("kubernetes"),
      });
      break;
    }
    default: {
      const never: never = config.engine;
      throw new Error(`unknown engine ${String(never)}`);
    }
  }
  const runner = new Runner(config, driver, jsonLog("runner"), options);
  await runner.start();
  return runner;
}

export { parseRunnerConfig };
