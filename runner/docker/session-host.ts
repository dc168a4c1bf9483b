/**
 * Where a Docker session reaches this machine by default: the address of Docker's default bridge
 * (a session network's gateway maps exactly the allowed ports to such a host-local address,
 * infra/docker/provider/host-isolation.ts). The model gateway listens there unless
 * AGENT_SESSIONS_GATEWAY_ADDRESS says otherwise.
 */
import { dockerClient } from "../../infra/docker/provider/provider.ts";

/** `dockerHost`: the engine's address (DOCKER_HOST). */
export async function dockerBridgeAddress(dockerHost: string): Promise<string> {
  const bridge = await dockerClient(dockerHost).getNetwork("bridge").inspect();
  const gateway: string | undefined = bridge.IPAM?.Config?.[0]?.Gateway;
  if (!gateway)
    throw new Error(
      "Docker's default bridge has no gateway address: set AGENT_SESSIONS_GATEWAY_ADDRESS to host:port, an address of this machine that sessions reach",
    );
  return gateway;
}
