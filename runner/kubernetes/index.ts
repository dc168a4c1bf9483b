/** Makes the Kubernetes engine's driver from the runner's settings (runner/main.ts picks the engine). */
import { KubeConfig } from "@kubernetes/client-node";
import type { StackManager } from "../../stacks/index.ts";
import type { DriverSettings } from "../engine/fast-path.ts";
import type { KubernetesRunnerConfig } from "./config.ts";
import { KubernetesDriver } from "./driver.ts";

/** The runner's settings the Kubernetes driver reads (runner/config.ts). */
export type KubernetesDriverConfig = {
  /** Sessions namespace and how a session's NetworkPolicy recognises the runner (runner/kubernetes/config.ts). */
  kubernetes: KubernetesRunnerConfig;
  /** The pods' workspace sidecar: files API, repo seed and diff (runner/kubernetes/workspace-files.ts). */
  gitImage?: string | undefined;
};

export function createKubernetesDriver(
  config: KubernetesDriverConfig,
  stacks: StackManager,
  settings: DriverSettings,
): KubernetesDriver {
  // KUBECONFIG when set, else ~/.kube/config, else the in-cluster service account.
  const kc = new KubeConfig();
  kc.loadFromDefault();
  return new KubernetesDriver(kc, stacks, {
    ...config.kubernetes,
    workspaceImage: config.gitImage,
    ...settings,
  });
}
