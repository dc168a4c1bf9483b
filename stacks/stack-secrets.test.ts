import { chmodSync, mkdirSync, mkdtempSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { PulumiCommand } from "@pulumi/pulumi/automation/index.js";
import { describe, expect, it } from "vitest";
import { parseDocument } from "yaml";
import { redactCommandText } from "./errors.ts";
import { StackManager } from "./stack-manager.ts";
import { settingsPath } from "./stack-settings.ts";

/**
 * Secrets never in a process's arguments, never in a log: every CLI call is recorded — the
 * Automation API's (an injected PulumiCommand) and ours that write secrets on stdin (a fake
 * `pulumi` executable that logs its argv and stdin).
 */
const CREDENTIAL = "sk-live-credential-0123456789";
const TOKEN = "adapter-token-abcdef-9876543210";
const image = `127.0.0.1:5000/agent-sessions/reference@sha256:${"c".repeat(64)}`;
const spec = { namespace: "default", name: "s", engine: "docker", image, contract: "v1alpha2" } as const;

function fakeCli(dir: string): string {
  mkdirSync(join(dir, "project"));
  const bin = join(dir, "pulumi");
  writeFileSync(
    bin,
    `#!/bin/sh\nprintf '%s\\n' "$*" >> "${dir}/argv.log"\ncat >> "${dir}/stdin.log"\nprintf '\\n' >> "${dir}/stdin.log"\nif [ "$1 $2" = "config get" ]; then printf '{"value":"${TOKEN}","secret":true}'; fi\n`,
  );
  chmodSync(bin, 0o755);
  return bin;
}

function recordingCommand(
  bin: string,
  calls: { args: string[]; cwd: string }[],
  upError: string,
): PulumiCommand {
  const inited: string[] = [];
  return {
    command: bin,
    // Only printed back (the event log's protocol choice): any release will do.
    version: { toString: () => "3.276.0" },
    run: async (args: string[], cwd: string, env: Record<string, string>) => {
      calls.push({ args: [...args], cwd });
      const [first, second] = args;
      if (first === "stack" && second === "ls")
        return { stdout: JSON.stringify(inited.map((name) => ({ name }))), stderr: "", code: 0 };
      if (first === "stack" && second === "init") {
        const name = args[2] ?? "";
        inited.push(name);
        writeFileSync(join(cwd, `Pulumi.${name}.yaml`), "encryptionsalt: v1:c2FsdA==:v1:x:y\n");
        // As the real CLI: the new stack's (empty) checkpoint in the file backend.
        const stacks = join(
          env.PULUMI_BACKEND_URL?.replace("file://", "") ?? "",
          ".pulumi",
          "stacks",
          "agent-sessions",
        );
        mkdirSync(stacks, { recursive: true });
        writeFileSync(join(stacks, `${name}.json`), "{}");
        return { stdout: "", stderr: "", code: 0 };
      }
      if (first === "up") throw new Error(upError);
      return { stdout: "", stderr: "", code: 0 };
    },
  } as unknown as PulumiCommand;
}

describe("secrets reach Pulumi without argv", () => {
  it("puts no credential or adapter token in any CLI argument or log line, settings 0600 under the data dir", async () => {
    const dir = mkdtempSync(join(tmpdir(), "as-stack-secrets-"));
    const dataDir = join(dir, "data");
    const projectDir = join(dir, "project");
    const calls: { args: string[]; cwd: string }[] = [];
    const logged: string[] = [];
    // A failing `up` whose text echoes a secret, as execa and a provider's stderr may.
    const upError = `code: 255\n stderr: error: provider said ${CREDENTIAL}\n err?: Error: Command failed with exit code 255: ${dir}/pulumi up --yes --stack default--s --secret agent-sessions:adapterToken=${TOKEN}\n`;
    const manager = await StackManager.create(
      { dataDir, projectDir, passphrase: "pass-phrase-for-tests" },
      {
        pulumiCommand: recordingCommand(fakeCli(dir), calls, upError),
        log: (level, msg, fields) => logged.push(JSON.stringify({ level, msg, ...fields })),
      },
    );
    const error = await manager
      .up(spec, { credentials: { MODEL_API_KEY: CREDENTIAL }, adapterToken: TOKEN })
      .catch((e: unknown) => e);
    expect(error).toMatchObject({ code: "INTERNAL" });

    const argv = [
      ...calls.map((c) => c.args.join(" ")),
      ...readFileSync(join(dir, "argv.log"), "utf8").split("\n"),
    ];
    expect(calls.map((c) => c.args.slice(0, 2).join(" "))).toEqual(["stack init", "up --yes"]);
    for (const line of argv) {
      expect(line).not.toContain(CREDENTIAL);
      expect(line).not.toContain(TOKEN);
    }
    // The secrets went on stdin, one `config set --secret` each.
    expect(readFileSync(join(dir, "argv.log"), "utf8").trim().split("\n")).toEqual([
      expect.stringMatching(/^config set --secret agent-sessions:stateHashKey --stack default--s/),
      expect.stringMatching(
        /^config set --secret agent-sessions:credentials --stack default--s --config-file .*stack-settings\/Pulumi.default--s.yaml/,
      ),
      expect.stringMatching(/^config set --secret agent-sessions:adapterToken --stack default--s/),
    ]);
    expect(readFileSync(join(dir, "stdin.log"), "utf8")).toContain(TOKEN);
    // Every operation is given the settings file under the data dir; `stack init` ran there.
    const file = settingsPath(dataDir, "default--s");
    expect(calls.find((c) => c.args[0] === "up")?.args).toEqual(
      expect.arrayContaining(["--config-file", file]),
    );
    expect(calls.find((c) => c.args[1] === "init")?.cwd).toBe(join(dataDir, "stack-settings"));
    expect(statSync(file).mode & 0o777).toBe(0o600);
    expect(readFileSync(file, "utf8")).toMatch(/encryptionsalt/);
    expect(readFileSync(file, "utf8")).not.toContain(TOKEN);
    // The failure was logged, redacted.
    const text = logged.join("\n");
    expect(text).toMatch(/stack operation failed/);
    expect(text).not.toContain(CREDENTIAL);
    expect(text).not.toContain(TOKEN);
  });

  it("scaling reads and writes the spec in the settings file, with no config CLI call", async () => {
    const dir = mkdtempSync(join(tmpdir(), "as-stack-secrets-"));
    const dataDir = join(dir, "data");
    const calls: { args: string[]; cwd: string }[] = [];
    const manager = await StackManager.create(
      { dataDir, projectDir: join(dir, "project"), passphrase: "pass-phrase-for-tests" },
      { pulumiCommand: recordingCommand(fakeCli(dir), calls, "boom"), log: () => undefined },
    );
    await manager.up(spec, { credentials: {}, adapterToken: TOKEN }).catch(() => undefined);
    calls.length = 0;
    await manager.scaleDown("default", "s").catch(() => undefined);
    // The stack is known from its checkpoint file: no `stack select` either, just the `up`.
    expect(calls.map((c) => c.args[0])).toEqual(["up"]);
    expect(readFileSync(settingsPath(dataDir, "default--s"), "utf8")).toMatch(/"replicas":0/);
  });
});

describe("the key of the credential hash in the Docker state", () => {
  it("is random per stack, made once on stdin, and kept across later ups and scaling", async () => {
    const dir = mkdtempSync(join(tmpdir(), "as-stack-secrets-"));
    const dataDir = join(dir, "data");
    const calls: { args: string[]; cwd: string }[] = [];
    const manager = await StackManager.create(
      { dataDir, projectDir: join(dir, "project"), passphrase: "pass-phrase-for-tests" },
      { pulumiCommand: recordingCommand(fakeCli(dir), calls, "boom"), log: () => undefined },
    );
    const keySets = () =>
      readFileSync(join(dir, "argv.log"), "utf8")
        .split("\n")
        .filter((line) => line.startsWith("config set --secret agent-sessions:stateHashKey"));
    await manager.up(spec, { credentials: {}, adapterToken: TOKEN }).catch(() => undefined);
    await manager.up({ ...spec, name: "t" }, { credentials: {}, adapterToken: TOKEN }).catch(() => undefined);
    expect(keySets().map((line) => line.split(" ")[5])).toEqual(["default--s", "default--t"]);
    // Each went on stdin: 32 random bytes, base64url, one per stack.
    const keys = readFileSync(join(dir, "stdin.log"), "utf8")
      .split("\n")
      .filter((line) => /^[A-Za-z0-9_-]{43}$/.test(line));
    expect(new Set(keys).size).toBe(2);
    // The CLI stored it (encrypted) in the settings file: from then on it is kept as it is.
    for (const name of ["default--s", "default--t"]) {
      const file = settingsPath(dataDir, name);
      const doc = parseDocument(readFileSync(file, "utf8"));
      doc.setIn(["config", "agent-sessions:stateHashKey"], { secure: "v1:abc" });
      writeFileSync(file, doc.toString());
    }
    await manager.up(spec, { credentials: {}, adapterToken: TOKEN }).catch(() => undefined);
    await manager.scaleDown("default", "t").catch(() => undefined);
    expect(keySets()).toHaveLength(2);
  });

  it("is made for a stack of an older version when it is only scaled", async () => {
    const dir = mkdtempSync(join(tmpdir(), "as-stack-secrets-"));
    const dataDir = join(dir, "data");
    const calls: { args: string[]; cwd: string }[] = [];
    const manager = await StackManager.create(
      { dataDir, projectDir: join(dir, "project"), passphrase: "pass-phrase-for-tests" },
      { pulumiCommand: recordingCommand(fakeCli(dir), calls, "boom"), log: () => undefined },
    );
    await manager.up(spec, { credentials: {}, adapterToken: TOKEN }).catch(() => undefined);
    writeFileSync(join(dir, "argv.log"), "");
    await manager.resume("default", "s").catch(() => undefined);
    expect(readFileSync(join(dir, "argv.log"), "utf8")).toMatch(
      /^config set --secret agent-sessions:stateHashKey --stack default--s/,
    );
  });
});

describe("reading the adapter token back (a restarted runner)", () => {
  it("asks the CLI with the settings file and reads the value from its stdout", async () => {
    const dir = mkdtempSync(join(tmpdir(), "as-stack-secrets-"));
    const dataDir = join(dir, "data");
    const calls: { args: string[]; cwd: string }[] = [];
    const manager = await StackManager.create(
      { dataDir, projectDir: join(dir, "project"), passphrase: "pass-phrase-for-tests" },
      { pulumiCommand: recordingCommand(fakeCli(dir), calls, "boom"), log: () => undefined },
    );
    await manager.up(spec, { credentials: {}, adapterToken: TOKEN }).catch(() => undefined);
    expect(await manager.adapterToken("default", "s")).toBe(TOKEN);
    const lines = readFileSync(join(dir, "argv.log"), "utf8").trim().split("\n");
    expect(lines.at(-1)).toMatch(
      /^config get agent-sessions:adapterToken --json --stack default--s --config-file .*stack-settings\/Pulumi.default--s.yaml/,
    );
  });
});

describe("redactCommandText", () => {
  it("blanks known values, config arguments and the command line", () => {
    const text =
      'Command failed with exit code 1: /opt/bin/pulumi config set-all --secret agent-sessions:credentials={"K":"v4lue-x"} --stack a\nstderr: v4lue-x';
    const out = redactCommandText(text, ["v4lue-x"]);
    expect(out).not.toContain("v4lue-x");
    expect(out).toContain("Command failed with exit code 1: pulumi config set-all [arguments not logged]");
    expect(redactCommandText("--secret k=abc --plaintext j=def")).toBe(
      "--secret k=[REDACTED] --plaintext j=[REDACTED]",
    );
  });
});
