/**
 * The Docker driver's fast paths against the test bed's real dockerd, Pulumi CLI, provider and
 * policy pack: a first create is made on the engine at once and recorded by the stack's `up`
 * behind it (the provider adopts volume, network and container, the bridge keeps exactly one set
 * of isolation rules), a killed container is healed from the recorded inputs, stop and resume
 * too; after each settles a refreshed `pulumi preview` of the stack proposes no change; remove
 * leaves nothing behind.
 */
import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  type SessionSpec,
  SessionSpec as SessionSpecSchema,
  workloadName,
} from "../../contracts/session-spec.ts";
import { GUARD_CHAIN, NAT_CHAIN } from "../../infra/docker/provider/host-isolation.ts";
import { DockerDriver } from "../../runner/docker/driver.ts";
import type { StackManager } from "../../stacks/index.ts";
import { dockerClient, stackManagerFor } from "../support/session-harness.ts";
import { expectNoStackDrift } from "../support/stack-drift.ts";
import { applyTestbedEnv, referenceImage } from "../support/testbed.ts";

applyTestbedEnv();

const suffix = randomBytes(3).toString("hex");
const sessionNamespace = "engine";
const sessionName = `ddrv-${suffix}`;
const containerName = workloadName(sessionNamespace, sessionName);
const secrets = { credentials: { MODEL_API_KEY: `sk-${suffix}` }, adapterToken: `adapter-${suffix}` };
const dataDir = mkdtempSync(join(tmpdir(), "docker-driver-"));
const docker = dockerClient();
let stacks: StackManager;
let driver: DockerDriver;
const logs: { level: string; msg: string }[] = [];

function spec(): SessionSpec {
  return SessionSpecSchema.parse({
    namespace: sessionNamespace,
    name: sessionName,
    engine: "docker",
    image: referenceImage().image,
    contract: "v1alpha2",
    env: { MODEL_BASE_URL: "http://10.213.0.1:11434/v1" },
    egress: [{ cidr: "10.213.0.1/32", port: 11434 }],
  });
}

async function readyz(endpoint: string): Promise<number> {
  return (await fetch(`http://${endpoint}/readyz`, { signal: AbortSignal.timeout(5000) })).status;
}

async function containerId(): Promise<string> {
  return (await docker.getContainer(containerName).inspect()).Id;
}

/** Our iptables rules naming the session network's bridge, per table. */
async function bridgeRules(): Promise<{ filter: string[]; nat: string[] }> {
  const network = await docker.getNetwork(`${containerName}-net`).inspect();
  const bridge = `br-${network.Id.slice(0, 12)}`;
  const rules = (table: string, chain: string) =>
    execFileSync("iptables", ["-w", "5", "-t", table, "-S", chain], { encoding: "utf8" })
      .split("\n")
      .filter((l) => l.includes(`agent-sessions:${bridge}`));
  return { filter: rules("filter", GUARD_CHAIN), nat: rules("nat", NAT_CHAIN) };
}

/** Once the driver's last operation settled, a refreshed `pulumi preview` proposes nothing. */
async function expectNoDrift(after: string): Promise<void> {
  await driver.settled(containerName);
  const stack = stacks.stackName(sessionNamespace, sessionName);
  await expectNoStackDrift(stack, dataDir, after);
}

beforeAll(async () => {
  ({ manager: stacks } = await stackManagerFor(join(dataDir, "runner")));
  driver = new DockerDriver(docker, stacks, {
    log: (level, msg) => logs.push({ level, msg }),
  });
});

afterAll(async () => {
  await driver?.remove(containerName).catch(() => undefined);
  rmSync(dataDir, { recursive: true, force: true });
});

describe("the Docker driver's fast paths (real dockerd, Pulumi, policy pack)", () => {
  it("creates a first session on the engine at once; the stack's up behind it adopts all of it and shows no drift", async () => {
    expect(await stacks.exists(sessionNamespace, sessionName)).toBe(false);
    const made = await driver.provision(containerName, spec(), secrets);
    // Answered before any stack existed: the engine was acted on directly.
    expect(await stacks.exists(sessionNamespace, sessionName)).toBe(false);
    expect(await readyz(made.endpoint)).toBe(200);
    expect(made.resolvedImageDigest).toBe(referenceImage().digest);
    const id = await containerId();
    await expectNoDrift("a fast create");
    // The recording adopted the container (same id) and installed the isolation once, not twice.
    expect(await containerId()).toBe(id);
    const rules = await bridgeRules();
    expect(rules.filter).toHaveLength(3); // replies, the model endpoint, DROP
    expect(rules.filter.at(-1)).toContain("-j DROP");
    expect(rules.nat).toHaveLength(1);
    expect((await stacks.outputs(sessionNamespace, sessionName)).endpoint).toBe(made.endpoint);
    expect(logs.filter((l) => l.level !== "info")).toEqual([]);
  });

  it("heals a killed container from the recorded inputs at once; the stack records the new one", async () => {
    const before = await containerId();
    await docker.getContainer(containerName).kill();
    const healed = await driver.provision(containerName, spec(), secrets);
    expect(await readyz(healed.endpoint)).toBe(200);
    const after = await containerId();
    expect(after).not.toBe(before);
    await expectNoDrift("a heal");
    expect(await containerId()).toBe(after);
    expect((await stacks.outputs(sessionNamespace, sessionName)).endpoint).toBe(healed.endpoint);
  });

  it("stops and resumes on the engine at once, without drift after each", async () => {
    await driver.scaleDown(containerName);
    expect(await driver.isRunning(containerName)).toBe(false);
    await expectNoDrift("a fast stop");
    const resumed = await driver.provision(containerName, spec(), secrets);
    expect(await readyz(resumed.endpoint)).toBe(200);
    await expectNoDrift("a fast resume");
    expect(logs.filter((l) => l.level !== "info")).toEqual([]);
  });

  it("stop → resume → stop → resume back to back: each acts at once, and once recorded the stack shows no drift", async () => {
    const seen: string[] = [];
    for (let i = 0; i < 2; i++) {
      await driver.scaleDown(containerName);
      expect(await driver.isRunning(containerName)).toBe(false);
      const resumed = await driver.provision(containerName, spec(), secrets);
      expect(await readyz(resumed.endpoint)).toBe(200);
      seen.push(await containerId());
    }
    // Every operation made its own container at once: none was a recording's.
    expect(new Set(seen).size).toBe(2);
    await expectNoDrift("stop → resume → stop → resume back to back");
    // No recording undid the last resume: its container is the one running.
    expect(await containerId()).toBe(seen.at(-1));
    expect(await driver.isRunning(containerName)).toBe(true);
    expect(logs.filter((l) => l.level !== "info")).toEqual([]);
  });

  it("removes everything: container, network, volume, isolation rules, stack", async () => {
    const network = await docker.getNetwork(`${containerName}-net`).inspect();
    const bridge = `br-${network.Id.slice(0, 12)}`;
    await driver.remove(containerName);
    const gone = (p: Promise<unknown>) =>
      p.then(
        () => false,
        (e: { statusCode?: number }) => e.statusCode === 404,
      );
    expect(await gone(docker.getContainer(containerName).inspect())).toBe(true);
    expect(await gone(docker.getNetwork(`${containerName}-net`).inspect())).toBe(true);
    expect(await gone(docker.getVolume(`${containerName}-workspace`).inspect())).toBe(true);
    expect(execFileSync("iptables", ["-w", "5", "-S", GUARD_CHAIN], { encoding: "utf8" })).not.toContain(
      bridge,
    );
    expect(await stacks.exists(sessionNamespace, sessionName)).toBe(false);
  });
});
