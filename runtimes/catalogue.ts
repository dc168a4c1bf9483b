/**
 * The runtimes that ship with the product, as data: one row a runtime. The server registers each
 * in namespace `default` on first start (proxy/lifecycle/shipped-runtimes.ts) and approves it with
 * the image its setting pins (proxy/lifecycle/runtime-approval.ts, proxy/config.ts); `serve` falls
 * back to the image the test bed built (bin/commands/serve.ts); the conformance suite runs each
 * (test/conformance/runtime-conformance.ts). Adding a runtime is a folder, one row here and an
 * image script (runtimes/README.md). Depends on zod and contracts/ only: the server imports it,
 * and the runtimes' code never does.
 */
import { z } from "zod";
import { RuntimeCapability } from "../contracts/resources.ts";
import { AgentCommand, RuntimeContract } from "../contracts/session-spec.ts";

/** The namespace the shipped runtimes are registered in. */
export const SHIPPED_NAMESPACE = "default";

export const ShippedRuntime = z.strictObject({
  /** The AgentRuntime's name, and its folder under runtimes/. */
  name: z.string().regex(/^[a-z][a-z0-9-]*$/),
  /** What it is, in a few words. */
  summary: z.string().min(1),
  contract: RuntimeContract,
  capabilities: z.array(RuntimeCapability),
  /** Its seed-004 agent in the image (`spec.agent.command`). @default contracts' REFERENCE_AGENT_COMMAND */
  agentCommand: AgentCommand.optional(),
  /** The server setting pinning its image by digest; unset, the runtime is not registered. */
  imageSetting: z.string().regex(/^AGENT_SESSIONS_[A-Z0-9_]+_IMAGE$/),
  /**
   * The test bed part that builds its image (`scripts/testbed up <part>`), which records it in
   * `<testbed home>/state/<part>.json`.
   */
  testbedImage: z.string().regex(/^[a-z0-9-]+-image$/),
});
export type ShippedRuntime = z.infer<typeof ShippedRuntime>;

export const SHIPPED_RUNTIMES = [
  {
    name: "reference",
    summary: "the deterministic chat adapter the tests use",
    contract: "v1alpha2",
    // Its conversation is a file on the session volume: it survives a restart of the workload.
    capabilities: ["streaming", "resume"],
    imageSetting: "AGENT_SESSIONS_REFERENCE_IMAGE",
    testbedImage: "reference-image",
  },
  {
    name: "pi",
    summary: "the Pi coding agent (`pi --mode rpc`) behind a v1alpha2 adapter",
    contract: "v1alpha2",
    capabilities: ["streaming", "tools", "resume"],
    agentCommand: ["/usr/local/bin/node", "/app/runtimes/pi/agent.ts"],
    imageSetting: "AGENT_SESSIONS_PI_IMAGE",
    testbedImage: "pi-image",
  },
  {
    name: "compass",
    summary: "our agent on the Oh My Pi SDK, run by Bun",
    contract: "v1alpha2",
    // mcp: the Agent's MCP servers' tools as its own, through the gateway (runtimes/kit/mcp-client.ts).
    capabilities: ["streaming", "tools", "resume", "mcp"],
    agentCommand: ["/usr/local/bin/bun", "/app/runtimes/compass/agent.ts"],
    imageSetting: "AGENT_SESSIONS_COMPASS_IMAGE",
    testbedImage: "compass-image",
  },
  {
    name: "hermes",
    summary: "Hermes (`hermes acp`) behind a v1alpha2 adapter",
    contract: "v1alpha2",
    // Its conversation is Hermes' state.db on the session volume, loaded again on resume.
    // mcp: the Agent's MCP servers' tools in Hermes' registry, through the gateway (hermes_mcp.py).
    capabilities: ["streaming", "tools", "resume", "mcp"],
    agentCommand: ["/usr/local/bin/node", "/app/runtimes/hermes/agent.ts"],
    imageSetting: "AGENT_SESSIONS_HERMES_IMAGE",
    testbedImage: "hermes-image",
  },
] as const satisfies readonly ShippedRuntime[];

export type ShippedRuntimeName = (typeof SHIPPED_RUNTIMES)[number]["name"];
export type ShippedImageSetting = (typeof SHIPPED_RUNTIMES)[number]["imageSetting"];
export type ShippedTestbedImage = (typeof SHIPPED_RUNTIMES)[number]["testbedImage"];

/** Each shipped runtime's image as the server's configuration pins it; one not given is not registered. */
export type ShippedRuntimeImages = { readonly [N in ShippedRuntimeName]?: string | undefined };

export function shippedRuntime(name: ShippedRuntimeName): (typeof SHIPPED_RUNTIMES)[number] {
  const row = SHIPPED_RUNTIMES.find((r) => r.name === name);
  if (!row) throw new Error(`no shipped runtime ${name}`);
  return row;
}
