import { type AgentRuntime, type AgentRuntimeSpec, API_VERSION } from "../../contracts/resources.ts";
import {
  SHIPPED_NAMESPACE,
  SHIPPED_RUNTIMES,
  type ShippedRuntime,
  type ShippedRuntimeImages,
} from "../../runtimes/catalogue.ts";
import type { Logger } from "../observability/log.ts";
import type { Store } from "../store/store.ts";

export type { ShippedRuntimeImages };

/** The AgentRuntime spec a shipped runtime is registered with, pinned to `image`. */
export function shippedRuntimeSpec(runtime: ShippedRuntime, image: string): AgentRuntimeSpec {
  return {
    image,
    contract: runtime.contract,
    capabilities: [...runtime.capabilities],
    ...(runtime.agentCommand ? { agent: { command: [...runtime.agentCommand] } } : {}),
  };
}

/**
 * First start: register the runtimes the project ships (runtimes/catalogue.ts) in namespace
 * `default`, each pinned by the digest the local registry gave its image, so a new user can bind
 * an Agent to one at once (approval is the server's configuration: runtime-approval.ts). One whose
 * image is not configured is not registered; an existing one is left as the user made it.
 */
export async function registerShippedRuntimes(
  store: Store,
  images: ShippedRuntimeImages,
  log: Logger,
): Promise<void> {
  for (const runtime of SHIPPED_RUNTIMES) await register(store, runtime, images[runtime.name], log);
}

async function register(
  store: Store,
  shipped: ShippedRuntime,
  image: string | undefined,
  log: Logger,
): Promise<void> {
  const ref = { namespace: SHIPPED_NAMESPACE, name: shipped.name };
  if (image === undefined) {
    log(
      "info",
      `no ${ref.name} image configured (${shipped.imageSetting}); AgentRuntime ${ref.namespace}/${ref.name} not registered`,
    );
    return;
  }
  if (await store.getResource("AgentRuntime", ref.namespace, ref.name)) return;
  const runtime: AgentRuntime = {
    apiVersion: API_VERSION,
    kind: "AgentRuntime",
    metadata: { ...ref },
    spec: shippedRuntimeSpec(shipped, image),
  };
  await store.putResource(runtime);
  log("info", `registered AgentRuntime ${ref.namespace}/${ref.name}`, { image });
}
