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
 * build for a whole run; likewise `AGENT_SESSIONS_TESTBED_<PART>_STATE` for the other images
 * (`_PI_STATE`, `_COMPASS_STATE`, `_HERMES_STATE`, `_BASE_STATE`), e.g. an image built from a
 * branch's runtime beside the machine's shared one, to compare both.
 */
export function builtImage(name: BuiltImageName): ReferenceImage {
  let image = builtImages.get(name);
  if (!image) {
    const part = name === "reference-image" ? "REFERENCE" : name.slice(0, -"-image".length).toUpperCase();
    const state =
      process.env[`AGENT_SESSIONS_TESTBED_${part}_STATE`] ?? join(testbedHome, "state", `${name}.json`);
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
 * A fact `scripts/testbed env` prints about the cluster (scripts/testbed.d/kubernetes.sh), read
 * when asked (after `applyTestbedEnv`), never at import; missing means the env was not applied.
 */
function clusterFact(name: string): string {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set: eval "$(scripts/testbed env)" (or applyTestbedEnv())`);
  return value;
}

/** The test bed's kubectl for its cluster (never the machine's). */
export function kubectlPath(): string {
  return clusterFact("AGENT_SESSIONS_TESTBED_KUBECTL");
}

/** The name of the cluster's one node. */
export function kubernetesNode(): string {
  return clusterFact("AGENT_SESSIONS_TESTBED_KUBERNETES_NODE");
}

/** Where the hostPath provisioner makes PV directories. */
export function kubernetesPvDir(): string {
  return clusterFact("AGENT_SESSIONS_TESTBED_KUBERNETES_PV_DIR");
}

/** The Docker bridge's address: Docker sessions reach the host there. */
export const DOCKER_BRIDGE_IP = "10.213.0.1";

/**
 * The host address a session of `engine` reaches host services at (the test model server, the git
 * server): the Docker bridge's, or the host end of the cluster's link (pods have no route to the
 * bridge; the link's host guard admits the model-server port range and the git port only).
 */
export function sessionHostAddress(engine: "docker" | "kubernetes"): string {
  return engine === "kubernetes" ? clusterFact("AGENT_SESSIONS_TESTBED_KUBERNETES_HOST") : DOCKER_BRIDGE_IP;
}

/**
 * Ports a test's host service for sessions of `engine` may listen on: any (0) on the Docker bridge;
 * on the cluster's link the range its host guard admits (scripts/testbed.d/kubernetes.sh
 * TB_KC_HOST_PORTS).
 */
export function sessionHostPorts(engine: "docker" | "kubernetes"): number[] {
  if (engine === "docker") return [0];
  return Array.from({ length: 11499 - 11434 + 1 }, (_, i) => 11434 + i);
}
