import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { checkpointOutputs, stackExists } from "./file-backend.ts";

const project = "agent-sessions";

function backend(files: Record<string, string>): string {
  const dir = mkdtempSync(join(tmpdir(), "as-file-backend-"));
  const stacks = join(dir, ".pulumi", "stacks", project);
  mkdirSync(stacks, { recursive: true });
  for (const [name, text] of Object.entries(files)) writeFileSync(join(stacks, name), text);
  return dir;
}

const checkpoint = (outputs: unknown, version = 3) =>
  JSON.stringify({
    version,
    checkpoint: {
      stack: "organization/agent-sessions/s",
      latest: {
        resources: [
          {
            urn: "urn:pulumi:s::agent-sessions::pulumi:pulumi:Stack::agent-sessions-s",
            type: "pulumi:pulumi:Stack",
            outputs,
          },
          { urn: "urn:x", type: "agent-sessions-docker:index:Volume", outputs: { name: "v" } },
        ],
      },
    },
  });

describe("a file backend answering without the CLI", () => {
  it("knows a stack by its checkpoint: present after init, gone after rm (only the .bak stays)", () => {
    const dir = backend({ "a.json": "{}", "b.json.gz": "", "c.json.bak": "{}" });
    expect(["a", "b", "c", "d"].map((s) => stackExists(dir, project, s))).toEqual([true, true, false, false]);
    rmSync(dir, { recursive: true });
  });

  it("reads the root stack's outputs, and gives no answer when it cannot be sure", () => {
    const outputs = { endpoint: "192.168.128.2:8080", replicas: 1 };
    const dir = backend({
      "plain.json": checkpoint(outputs),
      "secret-input.json": checkpoint(outputs).replace(
        '"outputs":{"name":"v"}',
        `"inputs":{"env":{"4dabf18193072939515e22adb298388d":"1b47061264138c4ac30d75fd1eb44270","ciphertext":"x"}},"outputs":{"name":"v"}`,
      ),
      "secret.json": checkpoint({
        token: { "4dabf18193072939515e22adb298388d": "1b47061264138c4ac30d75fd1eb44270", ciphertext: "x" },
      }),
      "v4.json": checkpoint(outputs, 4),
      "torn.json": checkpoint(outputs).slice(0, 80),
      "fresh.json": JSON.stringify({
        version: 3,
        checkpoint: { stack: "organization/agent-sessions/fresh", latest: null },
      }),
    });
    const plain = {
      endpoint: { value: "192.168.128.2:8080", secret: false },
      replicas: { value: 1, secret: false },
    };
    expect(checkpointOutputs(dir, project, "plain")).toEqual(plain);
    // Another resource's secret input (a credential) does not make the stack's outputs secret.
    expect(checkpointOutputs(dir, project, "secret-input")).toEqual(plain);
    for (const stack of ["secret", "v4", "torn", "fresh", "missing"])
      expect(checkpointOutputs(dir, project, stack), stack).toBeUndefined();
    rmSync(dir, { recursive: true });
  });
});
