/**
 * What the session-stack engine tests share: a StackManager on a throwaway data dir wired to the
 * test bed, Docker and registry probes, and polling. Nothing here fakes an engine; everything
 * throws (never skips) when the test bed is not there.
 */
import { randomBytes } from "node:crypto";
import { existsSync, mkdtempSync, readdirSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Docker from "dockerode";
import { type Logger, StackManager } from "../../stacks/index.ts";
import { registry, repoRoot } from "./testbed.ts";

export { repoRoot };

/** The Pulumi CLI the test bed built; throws with the fix when it is missing. */
export function pulumiBinary(): string {
  const home = process.env.PULUMI_HOME;
  const bin = home ? join(home, "bin", "pulumi") : "";
  if (!bin || !existsSync(bin)) {
    throw new Error(`no Pulumi CLI at ${bin || "$PULUMI_HOME/bin/pulumi"}: run scripts/testbed up pulumi`);
  }
  return bin;
}

/** A DNS-label-safe name unique to this run, so leftovers of a crashed run never collide. */
export function uniqueName(prefix: string): string {
  return `${prefix}-${randomBytes(3).toString("hex")}`;
}

export function tempDir(prefix: string): string {
  return mkdtempSync(join(tmpdir(), `${prefix}-`));
}

export type LogLine = { level: string; msg: string; fields?: Record<string, unknown> };

/** A StackManager on its own file backend under `dataDir`, talking to the test bed's engines. */
export async function stackManagerFor(
  dataDir: string,
  logs: LogLine[] = [],
): Promise<{ manager: StackManager; logs: LogLine[] }> {
  pulumiBinary();
  const log: Logger = (level, msg, fields) => {
    logs.push({ level, msg, ...(fields ? { fields } : {}) });
  };
  const env: Record<string, string> = {};
  for (const key of ["DOCKER_HOST", "KUBECONFIG"] as const) {
    const value = process.env[key];
    if (value) env[key] = value;
  }
  const manager = await StackManager.create(
    { dataDir, env, ...(process.env.PULUMI_HOME ? { pulumiHome: process.env.PULUMI_HOME } : {}) },
    { log },
  );
  return { manager, logs };
}

/**
 * Every file of a StackManager's file backend (checkpoints, their history and backups), as text:
 * everything a stack export or a reader of the backend would see.
 */
export function backendStateText(dataDir: string): string {
  const root = join(dataDir, "pulumi-state");
  if (!existsSync(root)) return "";
  const texts: string[] = [];
  const walk = (dir: string) => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const path = join(dir, entry.name);
      if (entry.isDirectory()) walk(path);
      else texts.push(readFileSync(path, "utf8"));
    }
  };
  walk(root);
  return texts.join("\n");
}

export function dockerClient(): Docker {
  const host = process.env.DOCKER_HOST ?? "";
  if (!host.startsWith("unix://")) throw new Error(`DOCKER_HOST (${host}) is not the test bed's socket`);
  return new Docker({ socketPath: host.slice("unix://".length) });
}

export type SessionObjects = {
  containers: Docker.ContainerInfo[];
  networks: Docker.NetworkInspectInfo[];
  volumes: Docker.VolumeInspectInfo[];
};

/** The Docker objects labelled as belonging to a session. */
export async function dockerObjectsOf(docker: Docker, session: string): Promise<SessionObjects> {
  const label = `agent-sessions.dev/session=${session}`;
  const filters = JSON.stringify({ label: [label] });
  const [containers, networks, volumes] = await Promise.all([
    docker.listContainers({ all: true, filters }),
    docker.listNetworks({ filters }),
    docker.listVolumes({ filters }),
  ]);
  return { containers, networks, volumes: volumes.Volumes ?? [] };
}

/** Runs a command in a container; resolves with its exit code and output once it ends. */
export async function dockerExec(
  container: Docker.Container,
  cmd: string[],
): Promise<{ exitCode: number; output: string }> {
  const exec = await container.exec({ Cmd: cmd, AttachStdout: true, AttachStderr: true });
  const stream = await exec.start({});
  const chunks: Buffer[] = [];
  await new Promise<void>((resolve, reject) => {
    stream.on("data", (chunk: Buffer) => chunks.push(chunk));
    stream.on("end", resolve);
    stream.on("error", reject);
  });
  const info = await exec.inspect();
  return { exitCode: info.ExitCode ?? -1, output: demultiplex(Buffer.concat(chunks)) };
}

/** Docker's multiplexed exec stream (8-byte frame headers) as plain text. */
function demultiplex(buffer: Buffer): string {
  let out = "";
  let offset = 0;
  while (offset + 8 <= buffer.length) {
    const size = buffer.readUInt32BE(offset + 4);
    out += buffer.subarray(offset + 8, offset + 8 + size).toString("utf8");
    offset += 8 + size;
  }
  return out;
}

/** The digest the registry itself serves for a tag (HEAD of the manifest). */
export async function registryDigest(repository: string, tag: string): Promise<string> {
  const res = await fetch(`http://${registry}/v2/${repository}/manifests/${tag}`, {
    method: "HEAD",
    headers: { accept: "application/vnd.docker.distribution.manifest.v2+json" },
  });
  if (res.status !== 200) throw new Error(`registry answered ${res.status} for ${repository}:${tag}`);
  const digest = res.headers.get("docker-content-digest");
  if (!digest) throw new Error(`registry gave no docker-content-digest for ${repository}:${tag}`);
  return digest;
}

export { untilSeconds as until } from "./until.ts";

/** Stack config files Pulumi writes beside a project (`Pulumi.<stack>.yaml`). */
export function stackConfigFiles(projectDir: string): string[] {
  return readdirSync(projectDir).filter((f) => /^Pulumi\..+\.ya?ml$/.test(f));
}

/**
 * Last-resort cleanup of a session's Docker objects (by label), for afterAll hooks after a
 * failed destroy. Volume last: a container or network still using it would block it.
 */
export async function removeSessionLeftovers(docker: Docker, session: string): Promise<void> {
  const left = await dockerObjectsOf(docker, session);
  const ignore = () => undefined;
  for (const c of left.containers) await docker.getContainer(c.Id).remove({ force: true }).catch(ignore);
  for (const n of left.networks) await docker.getNetwork(n.Id).remove().catch(ignore);
  for (const v of left.volumes) await docker.getVolume(v.Name).remove().catch(ignore);
}
