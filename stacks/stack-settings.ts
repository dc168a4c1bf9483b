/**
 * A session stack's settings file (`Pulumi.<stack>.yaml`: encryption salt, config, secure values),
 * kept under the data dir (`<dataDir>/stack-settings/`, directory 0700, file 0600) instead of the
 * project directory (the repo root, where `pulumi stack init` writes it world-readable). Every
 * command of a stack is given it with `--config-file`.
 *
 * Secret values reach the CLI on stdin (`pulumi config set --secret KEY` with no value reads it),
 * never in its arguments: a process's arguments are readable by every user of the machine
 * (/proc/<pid>/cmdline) and end up in error texts. Plain values are written into the file here.
 */
import { spawn } from "node:child_process";
import { chmodSync, copyFileSync, existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { parseDocument } from "yaml";

export const SETTINGS_DIR = "stack-settings";

export function settingsPath(dataDir: string, stackName: string): string {
  return join(dataDir, SETTINGS_DIR, `Pulumi.${stackName}.yaml`);
}

/**
 * Make sure the stack's settings live at `file` (0600). A stack made by an older version of this
 * library has them in the project directory: they are moved (once; a copy there is left alone
 * when `file` already exists, it may be someone else's).
 */
export function adoptSettings(projectDir: string, stackName: string, file: string): void {
  mkdirSync(join(file, ".."), { recursive: true, mode: 0o700 });
  const left = join(projectDir, `Pulumi.${stackName}.yaml`);
  if (!existsSync(file) && existsSync(left)) {
    copyFileSync(left, file);
    chmodSync(file, 0o600);
    rmSync(left, { force: true });
  }
  if (!existsSync(file)) writeFileSync(file, "", { mode: 0o600 });
  chmodSync(file, 0o600);
}

/** A plain (not secret) config value read from the settings file. */
export function readPlainConfig(file: string, key: string): string | undefined {
  const doc = parseDocument(readFileSync(file, "utf8"));
  const value = doc.getIn(["config", key]);
  return typeof value === "string" ? value : undefined;
}

/** Whether the settings file holds `key` at all (plain or secure): a secret's presence, never its value. */
export function hasConfig(file: string, key: string): boolean {
  const doc = parseDocument(readFileSync(file, "utf8"));
  return doc.hasIn(["config", key]);
}

/** Write plain config values into the settings file, keeping everything else (salt, secure values). */
export function writePlainConfig(file: string, values: Record<string, string>): void {
  const doc = parseDocument(readFileSync(file, "utf8"));
  for (const [key, value] of Object.entries(values)) doc.setIn(["config", key], value);
  writeFileSync(file, doc.toString(), { mode: 0o600 });
  chmodSync(file, 0o600);
}

export type CliInvocation = {
  /** The CLI binary (PulumiCommand.command). */
  command: string;
  cwd: string;
  env: Record<string, string>;
};

/**
 * A config value decrypted by the CLI (`pulumi config get KEY --json --config-file F`): the value
 * comes back on stdout, never through an argument.
 */
export async function getConfigValue(
  cli: CliInvocation,
  stackName: string,
  file: string,
  key: string,
): Promise<string> {
  const args = [
    "config",
    "get",
    key,
    "--json",
    "--stack",
    stackName,
    "--config-file",
    file,
    "--non-interactive",
  ];
  const { code, stdout, stderr } = await runCli(cli, args, "");
  if (code !== 0) throw new Error(`pulumi config get ${key} exited with ${code}: ${stderr.trim()}`);
  const parsed = JSON.parse(stdout) as { value?: unknown };
  if (typeof parsed.value !== "string") throw new Error(`pulumi config get ${key}: no string value`);
  return parsed.value;
}

/** Runs the CLI with `input` on stdin; stdout kept whole, stderr kept to 8 KiB. */
function runCli(
  cli: CliInvocation,
  args: string[],
  input: string,
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(cli.command, args, {
      cwd: cli.cwd,
      env: { ...process.env, ...cli.env },
      stdio: ["pipe", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    child.stdout.setEncoding("utf8");
    child.stdout.on("data", (chunk: string) => {
      stdout += chunk;
    });
    child.stderr.setEncoding("utf8");
    child.stderr.on("data", (chunk: string) => {
      if (stderr.length < 8192) stderr += chunk;
    });
    child.once("error", reject);
    child.once("close", (code) => resolve({ code, stdout, stderr }));
    child.stdin.on("error", () => undefined);
    child.stdin.end(input);
  });
}

/**
 * `pulumi config set --secret KEY --stack S --config-file F` with the value on stdin: the CLI
 * encrypts it with the stack's secrets provider. Rejects with the exit code and the CLI's stderr
 * (which never echoes the value), not the value.
 */
export function setSecretConfig(
  cli: CliInvocation,
  stackName: string,
  file: string,
  key: string,
  value: string,
): Promise<void> {
  const args = [
    "config",
    "set",
    "--secret",
    key,
    "--stack",
    stackName,
    "--config-file",
    file,
    "--non-interactive",
  ];
  return runCli(cli, args, value).then(({ code, stderr }) => {
    chmodSync(file, 0o600);
    if (code !== 0)
      throw new Error(`pulumi config set --secret ${key} exited with ${code}: ${stderr.trim()}`);
  });
}
