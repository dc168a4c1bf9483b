/**
 * The policy pack in the real engine: small Pulumi projects (test/fixtures/violating/<case>), each
 * the compliant baseline with one change, fail BOTH an Automation API `up` with the pack and the
 * plain CLI's `pulumi preview --policy-pack policies`, naming exactly the policy that change
 * breaks. The unchanged baselines (test/fixtures/compliant/<engine>) pass. Kubernetes cases run
 * against the test bed's cluster (the provider needs a reachable API server even to preview).
 */
import { spawnSync } from "node:child_process";
import { mkdirSync, rmSync } from "node:fs";
import { dirname, join } from "node:path";
import {
  type EngineEvent,
  LocalWorkspace,
  PulumiCommand,
  type Stack,
} from "@pulumi/pulumi/automation/index.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { PLUGIN_BIN_DIR } from "../../stacks/options.ts";
import { ensureNamespace, kubeClients } from "../support/kube-harness.ts";
import {
  dockerClient,
  removeSessionLeftovers,
  pulumiBinary,
  repoRoot,
  tempDir,
  uniqueName,
} from "../support/session-harness.ts";
import { applyTestbedEnv, referenceImage } from "../support/testbed.ts";

applyTestbedEnv();

const policyPack = join(repoRoot, "policies");
const fixtures = join(repoRoot, "test", "fixtures");
const kubernetesNamespace = "agent-sessions";
const stateDir = tempDir("policy-violations");
const backendDir = join(stateDir, "state");
mkdirSync(backendDir);
const stackName = uniqueName("policy");
const stacks: { stack: Stack; name: string }[] = [];

const env = (): Record<string, string> => ({
  PULUMI_BACKEND_URL: `file://${backendDir}`,
  PULUMI_CONFIG_PASSPHRASE: "policy-violations",
  PULUMI_SKIP_UPDATE_CHECK: "1",
  PULUMI_HOME: process.env.PULUMI_HOME ?? "",
  // Our Docker provider plugin, the node that runs it, the test bed's CLI and plugins.
  PATH: [PLUGIN_BIN_DIR, dirname(process.execPath), `${process.env.PULUMI_HOME}/bin`, process.env.PATH].join(
    ":",
  ),
});

/** Selects (or creates) the fixture's stack on the test's backend, with the fixture's config. */
async function fixtureStack(fixture: string): Promise<Stack> {
  const pulumiHome = process.env.PULUMI_HOME ?? "";
  const stack = await LocalWorkspace.createOrSelectStack(
    { stackName, workDir: join(fixtures, fixture) },
    {
      envVars: env(),
      pulumiHome,
      pulumiCommand: await PulumiCommand.get({ root: pulumiHome, skipVersionCheck: true }),
    },
  );
  const name = uniqueName("fixture");
  stacks.push({ stack, name });
  await stack.setAllConfig({
    image: { value: referenceImage().image },
    name: { value: name },
    namespace: { value: kubernetesNamespace },
  });
  return stack;
}

/** The names of the mandatory policies an operation reported violated. */
function violationsOf(events: EngineEvent[]): string[] {
  const names = events
    .filter((e) => e.policyEvent?.enforcementLevel === "mandatory")
    .map((e) => e.policyEvent!.policyName);
  return [...new Set(names)].sort();
}

/** The plain CLI, as an operator would run it by hand on the fixture's stack. */
function cliPreview(fixture: string): { status: number | null; output: string } {
  const result = spawnSync(
    pulumiBinary(),
    ["preview", "--policy-pack", policyPack, "--stack", stackName, "--non-interactive", "--color", "never"],
    { cwd: join(fixtures, fixture), env: { ...process.env, ...env() }, encoding: "utf8", timeout: 240_000 },
  );
  return { status: result.status, output: `${result.stdout}\n${result.stderr}` };
}

beforeAll(async () => {
  pulumiBinary();
  const { core } = await kubeClients();
  await ensureNamespace(core, kubernetesNamespace);
});

afterAll(async () => {
  // `up` of a violating program may have created its compliant resources before failing.
  const docker = dockerClient();
  for (const { stack, name } of stacks) {
    await stack.destroy().catch((e: unknown) => console.error(`cleanup: destroy of ${name} failed`, e));
    await stack.workspace.removeStack(stackName).catch(() => undefined);
    await removeSessionLeftovers(docker, name);
  }
  rmSync(stateDir, { recursive: true, force: true });
});

describe("violating programs fail the policy pack in the real engine", () => {
  it.each([
    ["violating/docker-tag-image", "image-pinned-by-digest"],
    ["violating/docker-privileged", "no-privileged-containers"],
    ["violating/kubernetes-host-path", "narrowed-mounts"],
    ["violating/kubernetes-service-account-token", "no-service-account-token"],
    ["violating/kubernetes-no-network-policy", "network-policy-selects-every-session-pod"],
  ])("%s fails `pulumi preview --policy-pack` and Automation API up, naming %s", async (fixture, policy) => {
    const stack = await fixtureStack(fixture);

    const preview = cliPreview(fixture);
    expect(preview.status, preview.output).not.toBe(0);
    expect(preview.output).toMatch(new RegExp(`\\[mandatory\\]\\s+${policy}\\b`));

    const events: EngineEvent[] = [];
    await expect(stack.up({ policyPacks: [policyPack], onEvent: (e) => events.push(e) })).rejects.toThrow();
    expect(violationsOf(events)).toEqual([policy]);
  });
});

describe("the compliant baselines pass the policy pack", () => {
  it.each(["compliant/docker", "compliant/kubernetes"])(
    "%s previews cleanly, CLI and Automation API",
    async (fixture) => {
      const stack = await fixtureStack(fixture);

      const preview = cliPreview(fixture);
      expect(preview.status, preview.output).toBe(0);

      const events: EngineEvent[] = [];
      await stack.preview({ policyPacks: [policyPack], onEvent: (e) => events.push(e) });
      expect(violationsOf(events)).toEqual([]);
    },
  );
});
