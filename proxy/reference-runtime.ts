import { type AgentRuntime, API_VERSION } from "../contracts/resources.ts";
import type { Logger } from "./log.ts";
import type { Store } from "./store/store.ts";

export const REFERENCE_RUNTIME = { namespace: "default", name: "reference" } as const;

/**
 * First start: register the project's reference runtime as AgentRuntime `default/reference`
 * (contract v1alpha2, streaming; approved by the server's configuration: runtime-approval.ts), pinned by the digest the local registry gave its
 * image, so a new user can bind an Agent to it at once. An existing one is left as the user made it.
 */
export async function registerReferenceRuntime(
  store: Store,
  image: string | undefined,
  log: Logger,
): Promise<void> {
  if (image === undefined) {
    log(
      "info",
      "no reference image configured (AGENT_SESSIONS_REFERENCE_IMAGE); AgentRuntime default/reference not registered",
    );
    return;
  }
  if (await store.getResource("AgentRuntime", REFERENCE_RUNTIME.namespace, REFERENCE_RUNTIME.name)) return;
  const runtime: AgentRuntime = {
    apiVersion: API_VERSION,
    kind: "AgentRuntime",
    metadata: { ...REFERENCE_RUNTIME },
    spec: { image, contract: "v1alpha2", capabilities: ["streaming"] },
  };
  await store.putResource(runtime);
  log("info", "registered AgentRuntime default/reference", { image });
}
