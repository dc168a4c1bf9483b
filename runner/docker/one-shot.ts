/**
 * One-shot runs (contract v1alpha1, contracts/agent-run.ts) on Docker: a fresh internal network
 * isolated from the host except the Agent's allowed endpoints (the same rules as a session's,
 * infra/docker/provider/host-isolation.ts), one hardened container running the runtime's one-shot
 * entry to completion, the tail of its stdout collected (bounded), then container, network and rules removed — whatever
 * happened. Nothing of a run outlives it; no volume is made (the workspace is a tmpfs).
 */
import { randomBytes } from "node:crypto";
import type Docker from "dockerode";
import { ONE_SHOT_INPUT_ENV } from "../../contracts/agent-run.ts";
import { CodedError } from "../../contracts/errors.ts";
import { LABEL_PREFIX, Labels } from "../../contracts/session-spec.ts";
import { isolateBridge, removeBridgeRules } from "../../infra/docker/provider/host-isolation.ts";
import { viaGateway } from "../../infra/docker/provider/gateway-url.ts";
import type { RunOnceCommand, RunOnceOutcome } from "../engine/driver.ts";
import { RunOutput } from "./run-output.ts";
import { shortLivedHostConfig } from "./short-lived-container.ts";

/** Label naming the run a container or network belongs to. */
export const RUN_LABEL = `${LABEL_PREFIX}/run`;
/** stdout kept of a run: its last MiB (the result record is the last line); the rest is dropped and counted. */
const MAX_OUTPUT_BYTES = 1024 * 1024;

export async function runOnce(docker: Docker, command: RunOnceCommand): Promise<RunOnceOutcome> {
  await pullIfMissing(docker, command.image);
  const suffix = randomBytes(3).toString("hex");
  const name = `as-run-${command.run_id}`.slice(0, 56).replace(/-+$/, "");
  const labels = { [Labels.managedBy]: "agent-sessions", [RUN_LABEL]: command.run_id };
  const network = await docker.createNetwork({
    Name: `${name}-${suffix}-net`,
    Internal: true,
    Labels: labels,
    CheckDuplicate: true,
    Options: { "com.docker.network.bridge.enable_icc": "false" },
  });
  const bridge = `br-${network.id.slice(0, 12)}`;
  let container: Docker.Container | undefined;
  try {
    const info = await docker.getNetwork(network.id).inspect();
    const gateway: string = info.IPAM?.Config?.[0]?.Gateway ?? "";
    const allowed = command.egress.map((r) => ({ address: r.cidr.replace(/\/32$/, ""), port: r.port }));
    await isolateBridge(bridge, gateway, allowed);
    // Credentials go to the engine at create time only (never in a logged object).
    const env = [
      ...Object.entries(command.env).map(([k, v]) => [k, viaGateway(v, command.egress, gateway)]),
      ["AGENT_WORKSPACE", "/workspace"],
      [ONE_SHOT_INPUT_ENV, command.input],
      ...Object.entries(command.credentials),
    ].map(([k, v]) => `${k}=${v}`);
    const options = oneShotContainerOptions(command, `${name}-${suffix}`, labels, env);
    const created = await docker.createContainer(options);
    container = created;
    await created.start();
    const resolved = await resolvedDigest(docker, created, command.image);
    const timedOut = await waitOrKill(created, command.timeout_ms);
    const state = (await created.inspect()).State;
    // Streamed, keeping the tail only: never the whole log in memory (run-output.ts).
    const output = new RunOutput(MAX_OUTPUT_BYTES);
    const logs = (await created.logs({ stdout: true, stderr: false, follow: true })) as NodeJS.ReadableStream;
    for await (const chunk of logs) output.push(Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk));
    const { text, droppedBytes } = output.result();
    return {
      exit_code: timedOut ? null : state.ExitCode,
      output: text,
      ...(droppedBytes > 0 ? { output_truncated_bytes: droppedBytes } : {}),
      timed_out: timedOut,
      resolved_image_digest: resolved,
    };
  } finally {
    await container?.remove({ force: true, v: true }).catch(() => undefined);
    await removeBridgeRules(bridge).catch(() => undefined);
    await docker
      .getNetwork(network.id)
      .remove()
      .catch(() => undefined);
  }
}

/**
 * The run's container (pure: tested apart from the engine): hardened like a session's, on the
 * run's own network `<name>-net`, logs capped (infra/docker/provider/log-limits.ts).
 */
export function oneShotContainerOptions(
  command: RunOnceCommand,
  name: string,
  labels: Record<string, string>,
  env: string[],
): Docker.ContainerCreateOptions {
  return {
    name,
    Image: command.image,
    ...(command.command ? { Entrypoint: command.command, Cmd: [] } : {}),
    User: "65532:65532",
    Env: env,
    Labels: labels,
    HostConfig: shortLivedHostConfig({
      network: `${name}-net`,
      mounts: [
        {
          Type: "tmpfs",
          Source: "",
          Target: "/workspace",
          TmpfsOptions: { SizeBytes: 64 * 1024 * 1024, Mode: 0o1777 },
        },
      ],
      tmpMiB: 64,
      memoryMiB: 512,
      pids: 256,
    }),
  };
}

/** True when the run outlived its deadline and was killed. */
async function waitOrKill(container: Docker.Container, timeoutMs: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<"timeout">((resolve) => {
    timer = setTimeout(() => resolve("timeout"), timeoutMs);
  });
  try {
    const outcome = await Promise.race([container.wait().then(() => "exited" as const), deadline]);
    if (outcome === "exited") return false;
    await container.kill().catch(() => undefined);
    await container.wait().catch(() => undefined);
    return true;
  } finally {
    clearTimeout(timer);
  }
}

/** The digest the engine ran, checked against the pin (as the session provider does). */
async function resolvedDigest(docker: Docker, container: Docker.Container, image: string): Promise<string> {
  const info = await container.inspect();
  const local = await docker.getImage(info.Image).inspect();
  const repo = image.split("@")[0];
  const pinned = local.RepoDigests.find((d) => d.startsWith(`${repo}@`)) ?? "";
  const digest = pinned.split("@")[1] ?? "";
  if (`${repo}@${digest}` !== image)
    throw new CodedError(
      "FAILED_PRECONDITION",
      `the engine ran ${pinned || "an unpinned image"}, not ${image}`,
    );
  return digest;
}

async function pullIfMissing(docker: Docker, image: string): Promise<void> {
  try {
    await docker.getImage(image).inspect();
    return;
  } catch (error) {
    if ((error as { statusCode?: number }).statusCode !== 404) throw error;
  }
  try {
    const stream = (await docker.pull(image)) as NodeJS.ReadableStream;
    await new Promise<void>((resolve, reject) =>
      docker.modem.followProgress(stream, (e: Error | null) => (e ? reject(e) : resolve())),
    );
  } catch (error) {
    throw new CodedError(
      "FAILED_PRECONDITION",
      `ImagePullFailed: cannot pull ${image}: ${(error as Error).message}`,
    );
  }
}
