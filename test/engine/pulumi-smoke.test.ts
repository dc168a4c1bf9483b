/**
 * The Pulumi CLI the test bed built really runs programs: an inline Automation API program with a
 * dynamic resource goes `up` and `destroy` on a file:// backend, with PULUMI_HOME from the test
 * bed. No mocks: the engine, the CLI and the dynamic-provider plugin are the real ones.
 */
import { mkdirSync, rmSync } from "node:fs";
import { join } from "node:path";
import * as pulumi from "@pulumi/pulumi";
import { LocalWorkspace, PulumiCommand, type Stack } from "@pulumi/pulumi/automation/index.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { pulumiBinary, repoRoot, tempDir } from "../support/session-harness.ts";
import { applyTestbedEnv } from "../support/testbed.ts";

applyTestbedEnv();

const dir = tempDir("pulumi-smoke");
const backendDir = join(dir, "state");
mkdirSync(backendDir);
let stack: Stack | undefined;

/** A dynamic resource whose provider runs in the engine's `pulumi-resource-pulumi-nodejs` plugin. */
class Greeting extends pulumi.dynamic.Resource {
  declare readonly text: pulumi.Output<string>;
  constructor(name: string, args: { who: pulumi.Input<string> }) {
    super(
      {
        // Self-contained: the SDK serializes this object into the state and runs it in the plugin.
        async create(inputs: { who: string }) {
          return { id: `greeting-${inputs.who}`, outs: { who: inputs.who, text: `hello ${inputs.who}` } };
        },
      },
      name,
      { ...args, text: undefined },
    );
  }
}

beforeAll(async () => {
  const pulumiHome = process.env.PULUMI_HOME ?? "";
  pulumiBinary();
  const command = await PulumiCommand.get({ root: pulumiHome, skipVersionCheck: true });
  stack = await LocalWorkspace.createOrSelectStack(
    {
      stackName: "smoke",
      projectName: "engine-smoke",
      program: async () => {
        const greeting = new Greeting("greeting", { who: "engine" });
        return { text: greeting.text, constant: "no random needed" };
      },
    },
    {
      workDir: dir,
      pulumiHome,
      pulumiCommand: command,
      projectSettings: {
        name: "engine-smoke",
        runtime: "nodejs",
        backend: { url: `file://${backendDir}` },
      },
      envVars: {
        PULUMI_CONFIG_PASSPHRASE: "engine-smoke",
        PULUMI_SKIP_UPDATE_CHECK: "1",
        // The dynamic-provider plugin resolves @pulumi/pulumi from its working directory (this
        // temp dir); point Node's resolution at the repo's packages.
        NODE_PATH: join(repoRoot, "node_modules"),
      },
    },
  );
});

afterAll(async () => {
  // Destroy what the test made even when an assertion failed half-way.
  if (stack) {
    await stack.destroy().catch(() => undefined);
    await stack.workspace.removeStack("smoke").catch(() => undefined);
  }
  rmSync(dir, { recursive: true, force: true });
});

describe("pulumi CLI (real engine, file backend)", () => {
  it("is the pinned release, run from the test bed's PULUMI_HOME", async () => {
    const command = await PulumiCommand.get({ root: process.env.PULUMI_HOME ?? "", skipVersionCheck: true });
    expect(command.command).toBe(pulumiBinary());
    expect(String(command.version)).toBe("3.276.0");
  });

  it("runs `up` of an inline program with a dynamic resource and returns its outputs", async () => {
    const result = await stack!.up();
    expect(result.summary.result).toBe("succeeded");
    expect(result.summary.resourceChanges).toMatchObject({ create: 2 });
    expect(result.outputs.text?.value).toBe("hello engine");
    expect(result.outputs.constant?.value).toBe("no random needed");
    const state = await stack!.exportStack();
    const types = (state.deployment.resources as { type: string }[]).map((r) => r.type);
    expect(types).toContain("pulumi-nodejs:dynamic:Resource");
  });

  it("runs `destroy` and leaves an empty stack", async () => {
    const result = await stack!.destroy();
    expect(result.summary.result).toBe("succeeded");
    expect(result.summary.resourceChanges).toMatchObject({ delete: 2 });
    const state = await stack!.exportStack();
    expect(state.deployment.resources ?? []).toEqual([]);
  });
});
