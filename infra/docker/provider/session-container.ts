/**
 * A session container, from SessionSpec to a running adapter: the ONE builder of its inputs and
 * the ONE place it is created, adopted and removed on the engine. Pure of Pulumi: the DockerSession
 * component (infra/docker/session.ts) declares these inputs, the provider (provider.ts) acts on
 * them when Pulumi asks, and the runner's fast path (runner/docker/driver.ts) acts on them at once and has
 * the stack recorded afterwards; whichever comes first makes the container, the other adopts it.
 */
import { createHmac } from "node:crypto";
import type Docker from "dockerode";
import { ADAPTER_PORT } from "../../../contracts/adapter.ts";
import {
  HARNESS_CONTRACT_ENV,
  Labels,
  type SessionSpec,
  workloadName,
} from "../../../contracts/session-spec.ts";
import { viaGateway } from "./gateway-url.ts";
import { CONTAINER_LOG_CONFIG } from "./log-limits.ts";
import { skillFileContent, skillFilePath } from "../../../contracts/skill-pack.ts";
import type { ContainerInputs, MountInput } from "./schema.ts";
import { fillSkillsVolume, SKILLS_TARGET, skillsVolumeName } from "./session-skills.ts";

/**
 * The label that carries a keyed hash of everything a container was made from (secrets
 * included): the provider adopts an existing container of the name only when it matches.
 */
export const SPEC_HASH_LABEL = "agent-sessions.dev/spec-hash";

/** The session's labels (volume, network and container carry them). */
export function sessionLabels(spec: Pick<SessionSpec, "namespace" | "name">): Record<string, string> {
  return {
    [Labels.managedBy]: "agent-sessions",
    [Labels.namespace]: spec.namespace,
    [Labels.session]: spec.name,
  };
}

/** "500m" → 0.5, "2" → 2. */
export function cpuCores(quantity: string): number {
  return quantity.endsWith("m") ? Number(quantity.slice(0, -1)) / 1000 : Number(quantity);
}

/** The container's declared inputs that depend on the spec alone (not the network's gateway, not secrets). */
export type SpecInputs = Omit<ContainerInputs, "env" | "secretEnv" | "secretEnvHashKey">;

export function containerSpecInputs(spec: SessionSpec): SpecInputs {
  const base = workloadName(spec.namespace, spec.name);
  const mounts: MountInput[] = [
    { type: "volume", source: `${base}-workspace`, target: "/workspace" },
    { type: "tmpfs", target: "/tmp", sizeBytes: 64 * 1024 * 1024 },
  ];
  // The container's own skills volume, read-only (the policy pack accepts exactly this mount).
  if (spec.skills)
    mounts.push({ type: "volume", source: skillsVolumeName(base), target: SKILLS_TARGET, readOnly: true });
  return {
    name: base,
    image: spec.image,
    user: "65532:65532",
    readOnlyRootfs: true,
    privileged: false,
    capDrop: ["ALL"],
    capAdd: [],
    securityOpt: ["no-new-privileges"],
    networkMode: `${base}-net`,
    mounts,
    memoryBytes: spec.resources.memoryMiB * 1024 * 1024,
    nanoCpus: Math.round(cpuCores(spec.resources.cpu) * 1e9),
    pidsLimit: spec.resources.pids,
    labels: sessionLabels(spec),
    adapterPort: spec.session?.port ?? ADAPTER_PORT,
    // An openai-chat harness answers /healthz only (contracts/session-spec.ts SessionProtocol).
    ...(spec.session ? { readyPath: "/healthz" } : {}),
    ...(spec.skills
      ? {
          skills: spec.skills.map((skill) => ({
            path: skillFilePath(skill),
            content: skillFileContent(skill),
          })),
        }
      : {}),
  };
}

/** The plain environment: the spec's, its allowed endpoints named through the network's gateway. */
export function containerEnv(spec: SessionSpec, gateway: string): Record<string, string> {
  return {
    ...Object.fromEntries(Object.entries(spec.env).map(([k, v]) => [k, viaGateway(v, spec.egress, gateway)])),
    ADAPTER_PORT: String(spec.session?.port ?? ADAPTER_PORT),
    ADAPTER_STREAMING: String(spec.streaming),
    AGENT_WORKSPACE: "/workspace",
    ...(spec.session ? { [HARNESS_CONTRACT_ENV.name]: HARNESS_CONTRACT_ENV.value } : {}),
  };
}

export function containerSecretEnv(
  credentials: Record<string, string>,
  adapterToken: string,
): Record<string, string> {
  return { ...credentials, ADAPTER_TOKEN: adapterToken };
}

/**
 * The spec-hash label's value: an HMAC of every input (secrets included, the state's hash key
 * left out) under the session's adapter token, so the label tells a matching container from a
 * stale one without letting anyone who reads labels test guesses of the credentials.
 */
export function specHash(inputs: ContainerInputs): string {
  const { secretEnvHashKey: _key, ...rest } = inputs;
  const canonical = JSON.stringify(rest, (_k, v: unknown) =>
    v !== null && typeof v === "object" && !Array.isArray(v)
      ? Object.fromEntries(Object.entries(v).sort(([a], [b]) => a.localeCompare(b)))
      : v,
  );
  return createHmac("sha256", inputs.secretEnv.ADAPTER_TOKEN ?? "")
    .update(canonical)
    .digest("hex");
}

/**
 * A session container's create options (pure: tested apart from the engine), exactly the inputs
 * the policy pack judged, plus capped logs (log-limits.ts) and the spec-hash label. `env` holds
 * the credentials: it is given to the engine here only, never logged.
 */
export function containerCreateOptions(
  inputs: ContainerInputs,
  env: string[],
): Docker.ContainerCreateOptions {
  return {
    name: inputs.name,
    Image: inputs.image,
    User: inputs.user,
    Env: env,
    Labels: { ...inputs.labels, [SPEC_HASH_LABEL]: specHash(inputs) },
    HostConfig: {
      ReadonlyRootfs: inputs.readOnlyRootfs,
      Privileged: inputs.privileged,
      CapDrop: inputs.capDrop,
      CapAdd: inputs.capAdd,
      SecurityOpt: inputs.securityOpt,
      NetworkMode: inputs.networkMode,
      ...(inputs.pidMode ? { PidMode: inputs.pidMode } : {}),
      ...(inputs.ipcMode ? { IpcMode: inputs.ipcMode } : {}),
      Mounts: inputs.mounts.map((m) =>
        m.type === "tmpfs"
          ? {
              Type: "tmpfs" as const,
              Source: "",
              Target: m.target,
              TmpfsOptions: { SizeBytes: m.sizeBytes ?? 64 * 1024 * 1024, Mode: 0o1777 },
            }
          : { Type: m.type, Source: m.source ?? "", Target: m.target, ReadOnly: m.readOnly ?? false },
      ),
      Memory: inputs.memoryBytes,
      NanoCpus: inputs.nanoCpus,
      PidsLimit: inputs.pidsLimit,
      RestartPolicy: { Name: "no" },
      LogConfig: { Type: CONTAINER_LOG_CONFIG.Type, Config: { ...CONTAINER_LOG_CONFIG.Config } },
    },
  };
}

function isNotFound(error: unknown): boolean {
  return (error as { statusCode?: number }).statusCode === 404;
}

async function pullIfMissing(docker: Docker, image: string): Promise<void> {
  try {
    await docker.getImage(image).inspect();
    return;
  } catch (error) {
    if (!isNotFound(error)) throw error;
  }
  try {
    const stream = (await docker.pull(image)) as NodeJS.ReadableStream;
    await new Promise<void>((resolve, reject) =>
      docker.modem.followProgress(stream, (e: Error | null) => (e ? reject(e) : resolve())),
    );
  } catch (error) {
    throw new Error(`ImagePullFailed: cannot pull ${image}: ${(error as Error).message}`);
  }
}

async function waitReady(ip: string, port: number, timeoutMs: number, path = "/readyz"): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let last = "";
  while (Date.now() < deadline) {
    try {
      const res = await fetch(`http://${ip}:${port}${path}`, { signal: AbortSignal.timeout(1000) });
      if (res.ok) return;
      last = `${path} answered ${res.status}`;
    } catch (error) {
      last = (error as Error).message;
    }
    await new Promise((r) => setTimeout(r, 25));
  }
  throw new Error(`adapter did not become ready at ${ip}:${port} within ${timeoutMs} ms (${last})`);
}

export type RunningContainer = { containerId: string; ipAddress: string; resolvedImageDigest: string };

/** What a running container of these inputs is: its id, address and the digest the engine ran. */
async function describe(docker: Docker, container: Docker.Container, inputs: ContainerInputs) {
  const info = await container.inspect();
  const ipAddress = info.NetworkSettings.Networks[inputs.networkMode]?.IPAddress ?? "";
  const image = await docker.getImage(info.Image).inspect();
  const repo = inputs.image.split("@")[0];
  const pinned = image.RepoDigests.find((d) => d.startsWith(`${repo}@`)) ?? "";
  const resolvedImageDigest = pinned.split("@")[1] ?? "";
  if (`${repo}@${resolvedImageDigest}` !== inputs.image) {
    throw new Error(`engine ran ${pinned || "an unpinned image"}, not ${inputs.image}`);
  }
  return { containerId: info.Id, ipAddress, resolvedImageDigest, running: info.State.Running };
}

/**
 * The session container of `inputs` running with its adapter ready. A container of that name
 * that runs (or is paused) and carries the same spec hash is adopted as it is (the runner's fast
 * path made it, or a create was retried after a crash); any other of that name (stale spec, exited) is removed
 * first. A container this call made is never left half-made: on failure it is removed again.
 */
export async function ensureSessionContainer(
  docker: Docker,
  inputs: ContainerInputs,
  readyTimeoutMs: number,
  options: {
    /** Only adopt a running container of these inputs; never remove or make one (a recording). */
    adoptOnly?: boolean;
    /**
     * Called with a container this call made, after it is created and before it starts (the
     * runner's startup CPU boost, runner/docker/startup-boost.ts); not for an adopted one.
     */
    beforeStart?: (containerId: string) => Promise<void>;
  } = {},
): Promise<RunningContainer> {
  const existing = docker.getContainer(inputs.name);
  const found = await existing.inspect().catch((error: unknown) => {
    if (isNotFound(error)) return undefined;
    throw error;
  });
  if (found) {
    if (found.State.Running && found.Config.Labels?.[SPEC_HASH_LABEL] === specHash(inputs)) {
      const { running: _running, ...adopted } = await describe(docker, existing, inputs);
      // A paused container (the paused tier, runner/docker/pause.ts) was Ready when it was frozen
      // and cannot answer until woken: it is the declared container as it is, adopted unprobed.
      if (!found.State.Paused)
        await waitReady(adopted.ipAddress, inputs.adapterPort, readyTimeoutMs, inputs.readyPath);
      return adopted;
    }
    if (options.adoptOnly) throw notAsDeclared(inputs.name);
    await existing.remove({ force: true, v: false });
  }
  if (options.adoptOnly) throw notAsDeclared(inputs.name);
  await pullIfMissing(docker, inputs.image);
  if (inputs.skills) await fillSkillsVolume(docker, inputs);
  const env = [...Object.entries(inputs.env), ...Object.entries(inputs.secretEnv ?? {})].map(
    ([k, v]) => `${k}=${v}`,
  );
  const container = await docker.createContainer(containerCreateOptions(inputs, env));
  try {
    await options.beforeStart?.(container.id);
    await container.start();
    const made = await describe(docker, container, inputs);
    await waitReady(made.ipAddress, inputs.adapterPort, readyTimeoutMs, inputs.readyPath);
    return {
      containerId: made.containerId,
      ipAddress: made.ipAddress,
      resolvedImageDigest: made.resolvedImageDigest,
    };
  } catch (error) {
    await container.remove({ force: true }).catch(() => undefined);
    throw error;
  }
}

function notAsDeclared(name: string): Error {
  return new Error(
    `container ${name} is not running as declared (a later operation changed it); recording only, nothing made`,
  );
}

/**
 * Stops (SIGTERM, so the adapter drains; the engine kills after the grace period) and removes a
 * session container; its volume stays. A container already gone is no error.
 */
export async function removeSessionContainer(docker: Docker, idOrName: string): Promise<void> {
  const container = docker.getContainer(idOrName);
  try {
    await container.stop({ t: 10 }).catch((e: unknown) => {
      if (!isNotFound(e) && (e as { statusCode?: number }).statusCode !== 304) throw e;
    });
    await container.remove({ force: true, v: false });
  } catch (error) {
    if (!isNotFound(error)) throw error;
  }
}

/** The gateway of the session's network, as the provider's Network output has it. */
export async function networkGateway(docker: Docker, networkName: string): Promise<string> {
  const info = await docker.getNetwork(networkName).inspect();
  return info.IPAM?.Config?.[0]?.Gateway ?? "";
}
