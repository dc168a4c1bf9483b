/**
 * The agent-sessions Docker provider: Volume, Network and Container of a Docker session over the
 * Docker Engine API (dockerode), as a Node.js Pulumi provider plugin. See PROVIDER.md.
 *
 * Credentials (`secretEnv`) are passed to the engine at create time only and never returned as
 * outputs: the state keeps a keyed hash of them for diffing (secretEnvHash), never the values.
 */
import { createHash, createHmac } from "node:crypto";
import type * as provider from "@pulumi/pulumi/provider/index.js";
import { isRpcSecret, unwrapRpcSecret } from "@pulumi/pulumi/runtime/rpc.js";
import Docker from "dockerode";
import { removeBridgeRules } from "./host-isolation.ts";
import { type ContainerInputs, DockerTypes, type NetworkInputs, type VolumeInputs } from "./schema.ts";
import { ensureSessionContainer, removeSessionContainer } from "./session-container.ts";
import { removeSkillsVolume } from "./session-skills.ts";
import { bridgeOf, ensureSessionNetwork, ensureSessionVolume } from "./session-network.ts";

export { containerCreateOptions } from "./session-container.ts";

type NetworkArgs = NetworkInputs;

export function dockerClient(dockerHost = process.env.DOCKER_HOST ?? "unix:///var/run/docker.sock"): Docker {
  if (!dockerHost.startsWith("unix://"))
    throw new Error(`DOCKER_HOST must be a unix socket, got ${dockerHost}`);
  return new Docker({ socketPath: dockerHost.slice("unix://".length) });
}

function typeOf(urn: string): string {
  // urn:pulumi:stack::project::parent$type::name → the last type segment.
  const types = urn.split("::")[2] ?? "";
  return types.split("$").pop() ?? "";
}

const KEYED = "hmac-sha256:";

/**
 * What the state keeps of a container's credentials: an HMAC under the stack's own random key
 * (`secretEnvHashKey`, a secret of the stack's config, never in the state or the container). A
 * plain hash would show two stacks with equal credentials, and let a dictionary be run against
 * the state; keyed, neither works without the key, while an unchanged secretEnv hashes the same.
 */
export function secretEnvHash(secretEnv: Record<string, string>, key: string): string {
  if (key.length < 16) throw new Error("secretEnvHashKey must be at least 16 characters");
  return `${KEYED}${createHmac("sha256", key).update(JSON.stringify(secretEnv)).digest("hex")}`;
}

/** The unkeyed hash older versions kept: recognised only to move a stack off it (diff, update). */
function legacyHash(value: unknown): string {
  return createHash("sha256").update(JSON.stringify(value)).digest("hex");
}

/** A container's inputs as its state keeps them: no credentials, no hash key. */
function stateOf(inputs: Record<string, unknown>): Record<string, unknown> {
  const { secretEnv: _secretEnv, secretEnvHashKey: _key, ...rest } = inputs;
  return rest;
}

/**
 * The SDK's provider server tells the engine it accepts secrets, so secret inputs (`secretEnv`)
 * arrive wrapped as `{<sig>: <secret sig>, value}`; the engine API needs the plain values.
 */
export function revealSecrets(value: unknown): unknown {
  if (isRpcSecret(value)) return revealSecrets(unwrapRpcSecret(value));
  if (Array.isArray(value)) return value.map(revealSecrets);
  if (value !== null && typeof value === "object") {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, revealSecrets(v)]));
  }
  return value;
}

function isNotFound(error: unknown): boolean {
  return (error as { statusCode?: number }).statusCode === 404;
}

export class DockerSessionProvider implements provider.Provider {
  readonly version = "0.1.0";
  readonly #docker: Docker;
  readonly #readyTimeoutMs: number;

  constructor(docker: Docker = dockerClient(), readyTimeoutMs = 60_000) {
    this.#docker = docker;
    this.#readyTimeoutMs = readyTimeoutMs;
  }

  async diff(
    _id: string,
    urn: string,
    olds: Record<string, unknown>,
    news: Record<string, unknown>,
  ): Promise<provider.DiffResult> {
    const type = typeOf(urn);
    const revealed = revealSecrets(news) as Record<string, unknown>;
    const comparable = (v: Record<string, unknown>): Record<string, unknown> => {
      const {
        containerId: _c,
        resolvedImageDigest: _r,
        ipAddress: _i,
        bridge: _b,
        gateway: _g,
        networkId: _n,
        secretEnv,
        secretEnvHash: stored,
        secretEnvHashKey,
        ...rest
      } = v;
      const hash =
        stored ??
        (secretEnv
          ? secretEnvHash(secretEnv as Record<string, string>, String(secretEnvHashKey))
          : undefined);
      return { ...rest, secretEnvHash: hash };
    };
    const before = comparable(revealSecrets(olds) as Record<string, unknown>);
    const after = comparable(revealed);
    // A stack of an older version keeps an unkeyed hash: the same credentials are no change
    // worth a new container, only a new hash in the state (update below).
    const legacy =
      typeof before.secretEnvHash === "string" &&
      !before.secretEnvHash.startsWith(KEYED) &&
      revealed.secretEnv !== undefined &&
      before.secretEnvHash === legacyHash(revealed.secretEnv);
    if (legacy) before.secretEnvHash = after.secretEnvHash;
    const replaces = Object.keys({ ...before, ...after }).filter(
      (k) => JSON.stringify(before[k]) !== JSON.stringify(after[k]),
    );
    if (legacy && replaces.length === 0 && type === DockerTypes.container)
      return { changes: true, replaces: [] };
    // Every property is create-time in the engine: any change replaces the object. A volume is
    // only ever replaced when its name changes (its data must survive everything else).
    if (type === DockerTypes.volume)
      return { changes: replaces.length > 0, replaces: replaces.includes("name") ? ["name"] : [] };
    return { changes: replaces.length > 0, replaces, deleteBeforeReplace: true };
  }

  /**
   * Only ever reached for a container whose state keeps the unkeyed hash of unchanged
   * credentials (diff above): the state gets the keyed hash; the container is left as it runs.
   */
  async update(
    _id: string,
    urn: string,
    olds: Record<string, unknown>,
    news: Record<string, unknown>,
  ): Promise<provider.UpdateResult> {
    if (typeOf(urn) !== DockerTypes.container) throw new Error(`no in-place update of ${urn}`);
    const inputs = revealSecrets(news) as Record<string, unknown>;
    return {
      outs: {
        ...stateOf(olds),
        secretEnvHash: secretEnvHash(
          (inputs.secretEnv ?? {}) as Record<string, string>,
          String(inputs.secretEnvHashKey),
        ),
      },
    };
  }

  async create(urn: string, wrapped: Record<string, unknown>): Promise<provider.CreateResult> {
    const inputs = revealSecrets(wrapped) as Record<string, unknown>;
    switch (typeOf(urn)) {
      case DockerTypes.volume:
        return this.#createVolume(inputs as unknown as VolumeInputs);
      case DockerTypes.network:
        return this.#createNetwork(inputs as unknown as NetworkArgs);
      case DockerTypes.container:
        return this.#createContainer(inputs as unknown as ContainerInputs);
      default:
        throw new Error(`unknown resource type in ${urn}`);
    }
  }

  async read(id: string, urn: string, props?: Record<string, unknown>): Promise<provider.ReadResult> {
    try {
      switch (typeOf(urn)) {
        case DockerTypes.volume:
          await this.#docker.getVolume(id).inspect();
          return { id, props };
        case DockerTypes.network:
          await this.#docker.getNetwork(id).inspect();
          return { id, props };
        case DockerTypes.container: {
          const info = await this.#docker.getContainer(id).inspect();
          return info.State.Running ? { id, props } : {};
        }
        default:
          throw new Error(`unknown resource type in ${urn}`);
      }
    } catch (error) {
      if (isNotFound(error)) return {}; // gone outside Pulumi: refresh drops it
      throw error;
    }
  }

  async delete(id: string, urn: string, props: Record<string, unknown>): Promise<void> {
    try {
      switch (typeOf(urn)) {
        case DockerTypes.volume:
          await this.#docker.getVolume(id).remove();
          return;
        case DockerTypes.network:
          // The bridge is named after the network id (see create); an empty name would match
          // every session's rules, and removeBridgeRules refuses it.
          await removeBridgeRules(
            typeof props.bridge === "string" && props.bridge ? props.bridge : bridgeOf(id),
          );
          await this.#docker.getNetwork(id).remove();
          return;
        case DockerTypes.container:
          // Already gone (the runner's fast path stopped it, or it was removed outside): no error.
          await removeSessionContainer(this.#docker, id);
          // Its skills volume goes with it (session-skills.ts).
          if (props.skills !== undefined && typeof props.name === "string")
            await removeSkillsVolume(this.#docker, props.name);
          return;
        default:
          throw new Error(`unknown resource type in ${urn}`);
      }
    } catch (error) {
      if (isNotFound(error)) return; // already gone: delete is idempotent
      throw error;
    }
  }

  async #createVolume(inputs: VolumeInputs): Promise<provider.CreateResult> {
    // Adopts our own volume of the same session (the runner's fast create, a retried create).
    await ensureSessionVolume(this.#docker, inputs);
    return { id: inputs.name, outs: { ...inputs } };
  }

  async #createNetwork(inputs: NetworkArgs): Promise<provider.CreateResult> {
    // Adopts the session's own network the runner's fast create made from the same inputs.
    const network = await ensureSessionNetwork(this.#docker, inputs);
    return { id: network.networkId, outs: { ...inputs, ...network } };
  }

  async #createContainer(inputs: ContainerInputs): Promise<provider.CreateResult> {
    // Adopts the container the runner's fast path already made from the same inputs (spec hash).
    // Recording only (stacks/stack-manager.ts): never makes one; a container not there as
    // declared means a later operation of the runner changed it, which this `up` must not undo.
    const running = await ensureSessionContainer(this.#docker, inputs, this.#readyTimeoutMs, {
      // RECORD_ONLY_ENV of contracts/session-spec.ts, by its literal name so the settings guard
      // (test/unit/settings.test.ts) sees which variable is read.
      adoptOnly: process.env.AGENT_SESSIONS_RECORD_ONLY === "1",
    });
    return {
      id: running.containerId,
      outs: {
        ...stateOf(inputs as unknown as Record<string, unknown>),
        secretEnvHash: secretEnvHash(inputs.secretEnv ?? {}, String(inputs.secretEnvHashKey)),
        ...running,
      },
    };
  }
}
