/**
 * What the engine tier knows about the test bed: where the engines are and what the image is.
 * The global setup brings the test bed up; tests read the facts from here.
 */
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

export const repoRoot = fileURLToPath(new URL("../..", import.meta.url));
export const testbedScript = join(repoRoot, "scripts", "testbed");
export const testbedHome = process.env.AGENT_SESSIONS_TESTBED_HOME ?? "/var/cache/agent-sessions-testbed";

export type ReferenceImage = { repository: string; tag: string; image: string; digest: string };

/** A test bed part that builds an image records it as `<part>.json` (reference-image, base-image, pi-image, …). */
type BuiltImageName = `${string}-image`;
const builtImages = new Map<BuiltImageName, ReferenceImage>();

/**
 * An image the test bed built and pushed, as recorded in its state dir (`<name>.json`) when this
 * test file first asked: one image for the whole file. Those state files are shared by every
 * checkout on the machine (the last build wins), and another one's `testbed up` may record its
 * own build meanwhile; the registry keeps the one read first, so it stays runnable by digest.
 * `AGENT_SESSIONS_TESTBED_REFERENCE_STATE` names a copy of the reference image's to pin one
 * build for a whole run.
 */
export function builtImage(name: BuiltImageName): ReferenceImage {
  let image = builtImages.get(name);
  if (!image) {
    const state =
      (name === "reference-image" ? process.env.AGENT_SESSIONS_TESTBED_REFERENCE_STATE : undefined) ??
      join(testbedHome, "state", `${name}.json`);
    image = JSON.parse(readFileSync(state, "utf8")) as ReferenceImage;
    builtImages.set(name, image);
  }
  return image;
}

export function referenceImage(): ReferenceImage {
  return builtImage("reference-image");
}

/** The environment `scripts/testbed env` prints, applied to this process. */
export function applyTestbedEnv(): void {
  const out = execFileSync(testbedScript, ["env"], { encoding: "utf8" });
  for (const line of out.split("\n")) {
    const m = line.match(/^export ([A-Z_]+)=(.*)$/);
    if (!m?.[1] || m[2] === undefined) continue;
    const value = m[2].replace(/^'(.*)'$/, "$1").replace(/:\$PATH$/, `:${process.env.PATH ?? ""}`);
    process.env[m[1]] = value;
  }
}

export const registry = "127.0.0.1:5000";

/**
 * Which Kubernetes cluster the engine tests use: the default 1.20 one (`scripts/testbed up
 * kubernetes`), or with `AGENT_SESSIONS_TESTBED_KUBERNETES=current` the 1.35 one (`scripts/testbed
 * up kubernetes-current`, scripts/testbed.d/KUBERNETES-CURRENT.md), whose facts `scripts/testbed
 * env` then prints. Read when asked (after `applyTestbedEnv`), never at import.
 */
export function kubernetesCurrent(): boolean {
  return process.env.AGENT_SESSIONS_TESTBED_KUBERNETES === "current";
}

/** The test bed's kubectl for its cluster (never the machine's). */
export function kubectlPath(): string {
  return process.env.AGENT_SESSIONS_TESTBED_KUBECTL ?? join(testbedHome, "kubernetes", "bin", "kubectl");
}

/** The name of the cluster's one node. */
export function kubernetesNode(): string {
  return process.env.AGENT_SESSIONS_TESTBED_KUBERNETES_NODE ?? "testbed";
}

/** Where the hostPath provisioner makes PV directories. */
export function kubernetesPvDir(): string {
  return process.env.AGENT_SESSIONS_TESTBED_KUBERNETES_PV_DIR ?? "/tmp/hostpath_pv";
}

/** The Docker bridge's address: Docker sessions (and 1.20's pods, on that bridge) reach the host there. */
export const DOCKER_BRIDGE_IP = "10.213.0.1";

/**
 * The host address a session of `engine` reaches host services at (the test model server, the git
 * server): the Docker bridge's, or on the 1.35 cluster the host end of its link (pods have no route
 * to the bridge; the link's host guard admits the model-server port range and the git port only).
 */
export function sessionHostAddress(engine: "docker" | "kubernetes"): string {
  return engine === "kubernetes"
    ? (process.env.AGENT_SESSIONS_TESTBED_KUBERNETES_HOST ?? DOCKER_BRIDGE_IP)
    : DOCKER_BRIDGE_IP;
}

/**
 * Ports a test's host service for sessions of `engine` may listen on: any (0) on the Docker bridge;
 * on the 1.35 cluster's link the range its host guard admits (scripts/testbed.d/kubernetes-current.sh
 * TB_KC_HOST_PORTS).
 */
export function sessionHostPorts(engine: "docker" | "kubernetes"): number[] {
  if (sessionHostAddress(engine) === DOCKER_BRIDGE_IP) return [0];
  return Array.from({ length: 11499 - 11434 + 1 }, (_, i) => 11434 + i);
}
