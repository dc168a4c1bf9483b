import { createHash } from "node:crypto";
/**
 * A Docker session's whole life through StackManager (stacks/) against the real engine: the Pulumi
 * CLI, our Docker provider plugin, the test bed's dockerd and registry, the policy pack. One
 * session goes up, is used, scaled down, resumed and destroyed; each step is checked from the
 * outside (dockerode by label, the registry, the adapter's own /readyz, the backend's files).
 */
import { execFileSync } from "node:child_process";
import { once } from "node:events";
import { createServer, type Server } from "node:net";
import { existsSync, readFileSync, rmSync, statSync } from "node:fs";
import { join } from "node:path";
import type Docker from "dockerode";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { droppedPackets } from "../../infra/docker/provider/host-isolation.ts";
import type { SessionOutputs, SessionSpecInput } from "../../contracts/session-spec.ts";
import type { StackManager } from "../../stacks/index.ts";
import {
  backendStateText,
  dockerClient,
  dockerExec,
  dockerObjectsOf,
  removeSessionLeftovers,
  registryDigest,
  repoRoot,
  stackConfigFiles,
  stackManagerFor,
  tempDir,
  uniqueName,
} from "../support/session-harness.ts";
import { applyTestbedEnv, referenceImage } from "../support/testbed.ts";

applyTestbedEnv();

const docker = dockerClient();
const dataDir = tempDir("docker-session-stack");
const namespace = "engine";
const name = uniqueName("docker");
const stackName = `${namespace}--${name}`;
const secrets = {
  credentials: { MODEL_API_KEY: `sk-engine-${uniqueName("credential")}` },
  adapterToken: `adapter-${uniqueName("token")}`,
};
const servers: Server[] = [];
let manager: StackManager;
let modelEndpoint = { address: "", port: 0 };

/** The test bed bridge's host address: where host-local daemons of the project may listen. */
function testbedBridgeAddress(): string {
  // Not os.networkInterfaces(): it leaves out a bridge without carrier (no container on it).
  const out = execFileSync("ip", ["-4", "-o", "addr", "show", "dev", "asbr0"], { encoding: "utf8" });
  const address = out.match(/inet (\d+\.\d+\.\d+\.\d+)\//)?.[1];
  if (!address)
    throw new Error("no IPv4 address on the test bed bridge asbr0: run scripts/testbed up docker");
  return address;
}

/** A TCP listener that greets every connection with `greeting` and closes it. */
async function listen(host: string, greeting: string): Promise<number> {
  // A peer that resets is fine here; an unhandled socket error would crash the test run.
  const server = createServer((socket) => {
    socket.on("error", () => undefined);
    socket.end(greeting);
  });
  servers.push(server);
  server.listen(0, host);
  await once(server, "listening");
  const address = server.address();
  if (address === null || typeof address === "string") throw new Error("listener has no port");
  return address.port;
}

/** From inside the session container: connect to host:port, print what it answered or why not. */
async function connectFromSession(host: string, port: number): Promise<string> {
  const container = await sessionContainer();
  const script = `
    const s = require("net").connect({ host: process.argv[1], port: Number(process.argv[2]), timeout: 2000 });
    let got = "";
    s.on("data", (d) => { got += d; });
    s.on("end", () => { console.log("answered " + got); process.exit(0); });
    s.on("timeout", () => { console.log("timeout"); process.exit(2); });
    s.on("error", (e) => { console.log(e.code); process.exit(3); });`;
  const { output } = await dockerExec(container, ["/bin/node", "-e", script, host, String(port)]);
  return output.trim();
}

async function sessionContainer(): Promise<Docker.Container> {
  const { containers } = await dockerObjectsOf(docker, name);
  if (containers.length !== 1) throw new Error(`expected one session container, found ${containers.length}`);
  return docker.getContainer(containers[0]!.Id);
}

async function sessionNetwork(): Promise<{ gateway: string; bridge: string }> {
  const { networks } = await dockerObjectsOf(docker, name);
  const network = await docker.getNetwork(networks[0]!.Id).inspect();
  return { gateway: network.IPAM?.Config?.[0]?.Gateway ?? "", bridge: `br-${network.Id.slice(0, 12)}` };
}

function spec(): SessionSpecInput {
  const ref = referenceImage();
  return {
    namespace,
    name,
    engine: "docker",
    image: ref.image,
    contract: "v1alpha2",
    egress: [{ cidr: `${modelEndpoint.address}/32`, port: modelEndpoint.port }],
    env: { MODEL_BASE_URL: `http://${modelEndpoint.address}:${modelEndpoint.port}/v1` },
  };
}

beforeAll(async () => {
  ({ manager } = await stackManagerFor(dataDir));
  const address = testbedBridgeAddress();
  modelEndpoint = { address, port: await listen(address, "model-endpoint") };
});

afterAll(async () => {
  // Whatever happened above, leave no stack, container, network or volume behind.
  if (await manager?.exists(namespace, name).catch(() => false)) {
    await manager.destroy(namespace, name).catch((e: unknown) => console.error("cleanup destroy failed", e));
  }
  await removeSessionLeftovers(docker, name);
  for (const server of servers) server.close();
  rmSync(dataDir, { recursive: true, force: true });
});

describe("a Docker session stack (real CLI, provider, dockerd and registry)", () => {
  let first: SessionOutputs;
  let firstContainerId = "";

  it("goes up: a container runs the image by the registry's digest and its adapter is ready", async () => {
    first = await manager.up(spec(), secrets);
    const ref = referenceImage();
    const digest = await registryDigest("agent-sessions/reference", ref.tag);
    expect(first.resolvedImageDigest).toBe(digest);
    expect(first.replicas).toBe(1);

    const container = await sessionContainer();
    const info = await container.inspect();
    firstContainerId = info.Id;
    expect(info.State.Running).toBe(true);
    expect(info.Config.Image).toBe(`${ref.repository}@${digest}`);
    expect(info.HostConfig.ReadonlyRootfs).toBe(true);
    expect(info.HostConfig.Privileged).toBe(false);
    expect(info.Config.User).toBe("65532:65532");

    const ready = await fetch(`http://${first.endpoint}/readyz`, { signal: AbortSignal.timeout(5000) });
    expect(ready.status).toBe(200);
  });

  it("keeps the credentials and the adapter token out of the stack state and config", async () => {
    // The container got them (that is the point of passing them)…
    const env = (await (await sessionContainer()).inspect()).Config.Env;
    expect(env).toContain(`MODEL_API_KEY=${secrets.credentials.MODEL_API_KEY}`);
    expect(env).toContain(`ADAPTER_TOKEN=${secrets.adapterToken}`);
    // …and the adapter holds that token: without it 401, with it past authentication (404).
    const url = `http://${first.endpoint}/v1/requests/no-such-request`;
    expect((await fetch(url)).status).toBe(401);
    const authorized = await fetch(url, { headers: { authorization: `Bearer ${secrets.adapterToken}` } });
    expect(authorized.status).toBe(404);
    // …but no file Pulumi wrote holds them in plaintext: the backend (checkpoints, history,
    // backups) and the stack's settings file, which lives under the data dir (0600), not beside
    // the project.
    const state = backendStateText(dataDir);
    expect(state).toContain(stackName);
    expect(state).not.toContain(secrets.credentials.MODEL_API_KEY);
    expect(state).not.toContain(secrets.adapterToken);
    // What it keeps of them is a hash keyed by the stack's own secret key: not the plain sha256
    // (equal in every stack with these credentials, open to a dictionary).
    expect(state).toMatch(/"secretEnvHash":\s*"hmac-sha256:[0-9a-f]{64}"/);
    const secretEnv = { ...secrets.credentials, ADAPTER_TOKEN: secrets.adapterToken };
    expect(state).not.toContain(createHash("sha256").update(JSON.stringify(secretEnv)).digest("hex"));
    expect(stackConfigFiles(repoRoot).filter((f) => f.includes(stackName))).toEqual([]);
    const configFile = join(dataDir, "stack-settings", `Pulumi.${stackName}.yaml`);
    expect(statSync(configFile).mode & 0o777).toBe(0o600);
    const config = readFileSync(configFile, "utf8");
    expect(config).toContain("secure:");
    expect(config).not.toContain(secrets.credentials.MODEL_API_KEY);
    expect(config).not.toContain(secrets.adapterToken);
  });

  it("lets the session reach its allowed endpoint through the gateway and no other host port", async () => {
    const { gateway, bridge } = await sessionNetwork();
    // The program rewrote the model URL to the gateway, which maps exactly that port.
    const env = (await (await sessionContainer()).inspect()).Config.Env;
    expect(env).toContain(`MODEL_BASE_URL=http://${gateway}:${modelEndpoint.port}/v1`);
    expect(await connectFromSession(gateway, modelEndpoint.port)).toBe("answered model-endpoint");

    // A host daemon on the session bridge's own address (a control-plane port, say) is dropped.
    const forbiddenPort = await listen(gateway, "control-plane");
    const droppedBefore = await droppedPackets(bridge);
    expect(await connectFromSession(gateway, forbiddenPort)).toBe("timeout");
    expect(await droppedPackets(bridge)).toBeGreaterThan(droppedBefore);
  });

  it("keeps what the session writes in its workspace volume", async () => {
    const container = await sessionContainer();
    const write = await dockerExec(container, ["sh", "-c", "echo hello > /workspace/probe"]);
    expect(write).toEqual({ exitCode: 0, output: "" });
  });

  it("changes nothing on a second up with the same spec and secrets (the container is kept)", async () => {
    const steps: string[] = [];
    await manager.up(spec(), secrets, { onProgress: (p) => p.step && steps.push(p.step) });
    expect((await (await sessionContainer()).inspect()).Id).toBe(firstContainerId);
    expect(steps.filter((s) => s !== "same")).toEqual([]);
  });

  it("replaces the container when a credential changes, and keeps it again on an up after that", async () => {
    const rotated = {
      ...secrets,
      credentials: { MODEL_API_KEY: `${secrets.credentials.MODEL_API_KEY}-rotated` },
    };
    await manager.up(spec(), rotated);
    const replaced = await (await sessionContainer()).inspect();
    expect(replaced.Id).not.toBe(firstContainerId);
    expect(replaced.Config.Env).toContain(`MODEL_API_KEY=${rotated.credentials.MODEL_API_KEY}`);
    const steps: string[] = [];
    await manager.up(spec(), rotated, { onProgress: (p) => p.step && steps.push(p.step) });
    expect((await (await sessionContainer()).inspect()).Id).toBe(replaced.Id);
    expect(steps.filter((s) => s !== "same")).toEqual([]);
  });

  it("scales down: no container, the volume and network stay", async () => {
    const outputs = await manager.scaleDown(namespace, name);
    expect(outputs.replicas).toBe(0);
    expect(outputs.endpoint).toBe("");
    expect(outputs.volumeName).toBe(first.volumeName);
    const objects = await dockerObjectsOf(docker, name);
    expect(objects.containers).toEqual([]);
    expect(objects.volumes.map((v) => v.Name)).toEqual([first.volumeName]);
    expect(objects.networks).toHaveLength(1);
  });

  it("resumes on the same volume: what was written before is still there", async () => {
    const outputs = await manager.resume(namespace, name);
    expect(outputs.replicas).toBe(1);
    expect(outputs.resolvedImageDigest).toBe(first.resolvedImageDigest);
    const container = await sessionContainer();
    expect((await container.inspect()).Id).not.toBe(firstContainerId);
    expect(await dockerExec(container, ["cat", "/workspace/probe"])).toEqual({
      exitCode: 0,
      output: "hello\n",
    });
    const ready = await fetch(`http://${outputs.endpoint}/readyz`, { signal: AbortSignal.timeout(5000) });
    expect(ready.status).toBe(200);
  });

  it("destroys: no container, network, volume, stack or stack config left", async () => {
    await manager.destroy(namespace, name);
    const objects = await dockerObjectsOf(docker, name);
    expect(objects).toEqual({ containers: [], networks: [], volumes: [] });
    expect(await manager.list()).not.toContain(stackName);
    expect(stackConfigFiles(repoRoot).filter((f) => f.includes(stackName))).toEqual([]);
    expect(existsSync(join(dataDir, "stack-settings", `Pulumi.${stackName}.yaml`))).toBe(false);
  });
});
