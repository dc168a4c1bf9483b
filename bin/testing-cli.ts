/**
 * The CLI as a user runs it, in a child process, against a server (the CLI commands' tests).
 * AGENT_SESSIONS_TOKEN is emptied so only `--token` counts.
 */
import { execFile } from "node:child_process";
import { join } from "node:path";

const CLI = join(import.meta.dirname, "cli.ts");

export type CliResult = { code: number; stdout: string; stderr: string };

export function runCli(serverUrl: string, token: string, args: string[]): Promise<CliResult> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [CLI, ...args, "--server", serverUrl, "--token", token],
      { env: { ...process.env, AGENT_SESSIONS_TOKEN: "" } },
      (error, stdout, stderr) =>
        resolve({ code: error ? Number((error as { code?: number }).code ?? 1) : 0, stdout, stderr }),
    );
  });
}
