import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { PulumiCommand } from "@pulumi/pulumi/automation/index.js";
import { describe, expect, it } from "vitest";
import { StackManager } from "./stack-manager.ts";

/** A PulumiCommand that records every CLI call instead of running one. */
function recordingCommand(calls: string[][]): PulumiCommand {
  return {
    command: "pulumi",
    version: null,
    run: async (args: string[]) => {
      calls.push(args);
      throw new Error("no CLI in this test");
    },
  } as unknown as PulumiCommand;
}

const image = `127.0.0.1:5000/agent-sessions/reference@sha256:${"c".repeat(64)}`;
const good = { namespace: "default", name: "ok", engine: "docker", image, contract: "v1alpha2" } as const;
const secrets = { credentials: {}, adapterToken: "t" };

describe("StackManager input validation", () => {
  it.each([
    ["a bad name", { ...good, name: "Bad_Name" }, /name: must be a DNS label/],
    [
      "an image without digest",
      { ...good, image: "127.0.0.1:5000/x:latest" },
      /image must be pinned by digest/,
    ],
    [
      "a runtime without the session contract",
      { ...good, contract: "v1alpha1" },
      /declares contract v1alpha1/,
    ],
    ["a negative idleTimeout", { ...good, idleTimeoutSeconds: -5 }, /idleTimeout must not be negative/],
  ])("rejects %s with INVALID_ARGUMENT before any Pulumi call", async (_what, spec, message) => {
    const calls: string[][] = [];
    const manager = await StackManager.create(
      { dataDir: mkdtempSync(join(tmpdir(), "as-stacks-")) },
      { pulumiCommand: recordingCommand(calls), log: () => undefined },
    );
    const error = await manager.up(spec as never, secrets).catch((e: unknown) => e);
    expect(error).toMatchObject({ code: "INVALID_ARGUMENT" });
    expect(String((error as Error).message)).toMatch(message);
    expect(calls).toEqual([]);
  });

  it("derives stack names from namespace and session name", async () => {
    const manager = await StackManager.create(
      { dataDir: mkdtempSync(join(tmpdir(), "as-stacks-")) },
      { pulumiCommand: recordingCommand([]), log: () => undefined },
    );
    expect(manager.stackName("team-a", "chat-1")).toBe("team-a--chat-1");
    expect(() => manager.stackName("Team", "x")).toThrow();
  });
});
