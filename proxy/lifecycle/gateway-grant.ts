import type { Agent } from "../../contracts/resources.ts";
import type { GatewayGrant } from "../../contracts/runner-protocol.ts";

/**
 * What the runner's model gateway needs of an Agent (issue 35), sent beside the credential values
 * with every provision, warm pool and one-shot run: the real endpoint it forwards to, the model
 * names it lets a session ask for, the budgets it enforces, keyed `<namespace>/<agent>` (usage and
 * budgets are counted per Agent). Absent when the Agent has no model: there is nothing to reach.
 */
export function gatewayGrantOf(agent: Agent): GatewayGrant | undefined {
  const { model, limits } = agent.spec;
  if (!model) return undefined;
  return {
    agent: `${agent.metadata.namespace}/${agent.metadata.name}`,
    upstream: model.baseUrl,
    ...(model.allowedModels ? { models: model.allowedModels } : {}),
    ...(limits ? { limits } : {}),
  };
}

/** `{gateway}` to spread into a runner command, or nothing when the Agent has no model. */
export function gatewayFieldOf(agent: Agent): { gateway?: GatewayGrant } {
  const gateway = gatewayGrantOf(agent);
  return gateway ? { gateway } : {};
}
