import { type AgentRuntime, type AgentRuntimeSpec, API_VERSION } from "../../contracts/resources.ts";
import type { Logger } from "../observability/log.ts";
import type { Store } from "../store/store.ts";

export const REFERENCE_RUNTIME = { namespace: "default", name: "reference" } as const;
export const PI_RUNTIME = { namespace: "default", name: "pi" } as const;
export const COMPASS_RUNTIME = { namespace: "default", name: "compass" } as const;
export const HERMES_RUNTIME = { namespace: "default", name: "hermes" } as const;

/** The `pi` runtime's agent for seed-004 sessions (runtimes/pi/agent.ts, in the pi image). */
export const PI_AGENT_COMMAND = ["/usr/local/bin/node", "/app/runtimes/pi/agent.ts"];

/** The `compass` runtime's agent for seed-004 sessions (runtimes/compass/agent.ts, run by Bun). */
export const COMPASS_AGENT_COMMAND = ["/usr/local/bin/bun", "/app/runtimes/compass/agent.ts"];
/** The `hermes` runtime's agent for seed-004 sessions (runtimes/hermes/agent.ts, in the hermes image). */
export const HERMES_AGENT_COMMAND = ["/usr/local/bin/node", "/app/runtimes/hermes/agent.ts"];

/** The images of the runtimes that ship with the product; one not given is not registered. */
export type ShippedRuntimeImages = {
  reference: string | undefined;
  pi?: string | undefined;
  compass?: string | undefined;
  hermes?: string | undefined;
};

/**
 * First start: register the runtimes the project ships, each pinned by the digest the local
 * registry gave its image, so a new user can bind an Agent to one at once (approval is the
 * server's configuration: runtime-approval.ts):
 * - `default/reference`: the deterministic chat adapter (v1alpha2, streaming, resume);
 * - `default/pi`: the Pi coding agent behind the v1alpha2 adapter of runtimes/pi (streaming,
 *   tools, resume), its seed-004 agent `runtimes/pi/agent.ts`;
 * - `default/compass`: our agent on the Oh My Pi SDK, run by Bun (runtimes/compass: streaming,
 *   tools, resume), its seed-004 agent `runtimes/compass/agent.ts`.
 * - `default/hermes`: Hermes (`hermes acp`) behind the v1alpha2 adapter of runtimes/hermes
 *   (streaming, tools, resume), its seed-004 agent `runtimes/hermes/agent.ts`.
 * An existing one is left as the user made it.
 */
export async function registerShippedRuntimes(
  store: Store,
  images: ShippedRuntimeImages,
  log: Logger,
): Promise<void> {
  await register(
    store,
    REFERENCE_RUNTIME,
    images.reference,
    "AGENT_SESSIONS_REFERENCE_IMAGE",
    log,
    (image) => ({
      image,
      contract: "v1alpha2",
      // Its conversation is a file on the session volume: it survives a restart of the workload.
      capabilities: ["streaming", "resume"],
    }),
  );
  await register(store, PI_RUNTIME, images.pi, "AGENT_SESSIONS_PI_IMAGE", log, (image) => ({
    image,
    contract: "v1alpha2",
    capabilities: ["streaming", "tools", "resume"],
    agent: { command: PI_AGENT_COMMAND },
  }));
  await register(store, COMPASS_RUNTIME, images.compass, "AGENT_SESSIONS_COMPASS_IMAGE", log, (image) => ({
    image,
    contract: "v1alpha2",
    capabilities: ["streaming", "tools", "resume"],
    agent: { command: COMPASS_AGENT_COMMAND },
  }));
  await register(store, HERMES_RUNTIME, images.hermes, "AGENT_SESSIONS_HERMES_IMAGE", log, (image) => ({
    image,
    contract: "v1alpha2",
    // Its conversation is Hermes' state.db on the session volume, loaded again on resume.
    capabilities: ["streaming", "tools", "resume"],
    agent: { command: HERMES_AGENT_COMMAND },
  }));
}

async function register(
  store: Store,
  ref: { namespace: string; name: string },
  image: string | undefined,
  setting: string,
  log: Logger,
  spec: (image: string) => AgentRuntimeSpec,
): Promise<void> {
  if (image === undefined) {
    log(
      "info",
      `no ${ref.name} image configured (${setting}); AgentRuntime ${ref.namespace}/${ref.name} not registered`,
    );
    return;
  }
  if (await store.getResource("AgentRuntime", ref.namespace, ref.name)) return;
  const runtime: AgentRuntime = {
    apiVersion: API_VERSION,
    kind: "AgentRuntime",
    metadata: { ...ref },
    spec: spec(image),
  };
  await store.putResource(runtime);
  log("info", `registered AgentRuntime ${ref.namespace}/${ref.name}`, { image });
}
