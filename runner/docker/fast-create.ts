/**
 * The Docker fast create: a session's first workload made at once on the engine, from exactly the
 * inputs its stack's program declares (the provider's own builders), after the policy pack has
 * judged them in process under the config an `up` would give it. The caller (runner/docker/driver.ts)
 * answers then and has the stack record the create with an `up` in the background; the provider
 * adopts volume, network and container (session-network.ts, session-container.ts).
 *
 * Declines (undefined, the full path goes) when the pack cannot be run in process (another pack is
 * attached) or judges anything a violation: the `up` then reports it the way it always does.
 */
import type Docker from "dockerode";
import { parseOrThrow } from "../../contracts/errors.ts";
import { SessionSpec } from "../../contracts/session-spec.ts";
import { type ContainerInputs, DockerTypes } from "../../infra/docker/provider/schema.ts";
import {
  containerEnv,
  containerSecretEnv,
  containerSpecInputs,
  ensureSessionContainer,
  type RunningContainer,
} from "../../infra/docker/provider/session-container.ts";
import {
  ensureSessionNetwork,
  ensureSessionVolume,
  sessionNetworkInputs,
  sessionVolumeInputs,
} from "../../infra/docker/provider/session-network.ts";
import type { StackManager } from "../../stacks/index.ts";
import type { DriverLog, Secrets } from "../engine/fast-path.ts";

/** What the engine is asked to make, as the policy pack is shown it in an `up`. */
export function dockerSessionResources(spec: SessionSpec, container: ContainerInputs) {
  return [
    { type: DockerTypes.volume, name: "session-volume", props: sessionVolumeInputs(spec) },
    { type: DockerTypes.network, name: "session-network", props: sessionNetworkInputs(spec) },
    { type: DockerTypes.container, name: "session-container", props: container },
  ];
}

/** The container's inputs once its network's gateway is known (the state's hash key aside). */
export function fastContainerInputs(spec: SessionSpec, secrets: Secrets, gateway: string): ContainerInputs {
  return {
    ...containerSpecInputs(spec),
    env: containerEnv(spec, gateway),
    secretEnv: containerSecretEnv(secrets.credentials, secrets.adapterToken),
    // Only the state's hash needs it, and the recording `up` brings the stack's own.
    secretEnvHashKey: "",
  };
}

export async function fastCreateDocker(
  docker: Docker,
  stacks: Pick<StackManager, "judge">,
  specInput: SessionSpec,
  secrets: Secrets,
  log: DriverLog,
  options: {
    /** Awaited before the container (the one mount of the volume) is made: a fork's seed copy. */
    beforeContainer?: Promise<void> | undefined;
    /** @default 60000 */
    readyTimeoutMs?: number;
    /** Called with the container once created, before it starts (the startup CPU boost). */
    beforeStart?: (containerId: string) => Promise<void>;
  } = {},
): Promise<RunningContainer | undefined> {
  const readyTimeoutMs = options.readyTimeoutMs ?? 60_000;
  const spec = parseOrThrow(SessionSpec, { ...specInput, replicas: 1 }, "session spec");
  const judge = async (gateway: string) => {
    const violations = await stacks.judge(
      spec,
      dockerSessionResources(spec, fastContainerInputs(spec, secrets, gateway)),
    );
    if (violations === undefined) {
      log("info", "fast create declined: the attached policy packs cannot be judged in process");
      return false;
    }
    if (violations.length > 0) {
      log("warn", "fast create declined: the policy pack refuses the session's resources", {
        policies: [...new Set(violations.map((v) => v.policy))],
      });
      return false;
    }
    return true;
  };
  let network: { gateway: string };
  try {
    // The gateway is not known before the network exists; the env it fills in is judged again below.
    if (!(await judge("0.0.0.0"))) return undefined;
    await ensureSessionVolume(docker, sessionVolumeInputs(spec));
    network = await ensureSessionNetwork(docker, sessionNetworkInputs(spec));
  } catch (error) {
    log("warn", "fast create failed; taking the full path", {
      error: (error as Error).message.slice(0, 500),
    });
    return undefined;
  }
  if (!(await judge(network.gateway))) return undefined;
  // Its failure is the provision's (the volume was not seeded), never a reason for the full path.
  await options.beforeContainer;
  try {
    return await ensureSessionContainer(
      docker,
      fastContainerInputs(spec, secrets, network.gateway),
      readyTimeoutMs,
      options.beforeStart ? { beforeStart: options.beforeStart } : {},
    );
  } catch (error) {
    log("warn", "fast create failed; taking the full path", {
      error: (error as Error).message.slice(0, 500),
    });
    return undefined;
  }
}
