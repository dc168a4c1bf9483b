import { execFile } from "node:child_process";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";

const CLI = join(import.meta.dirname, "..", "cli.ts");

/** `agent-sessions runner …` as a user runs it, with only the given AGENT_SESSIONS_* variables. */
function runner(args: string[], env: Record<string, string> = {}): Promise<{ code: number; stderr: string }> {
  const clean = Object.fromEntries(
    Object.entries(process.env).filter(([k]) => !k.startsWith("AGENT_SESSIONS_")),
  );
  const dataDir = mkdtempSync(join(tmpdir(), "agent-sessions-runner-cli-"));
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [CLI, "runner", "--data-dir", dataDir, ...args],
      { env: { ...clean, ...env }, timeout: 30_000 },
      (error, _stdout, stderr) =>
        resolve({ code: error ? Number((error as { code?: number }).code ?? 1) : 0, stderr }),
    );
  });
}

const TOKEN = { AGENT_SESSIONS_RUNNER_TOKEN: "runner-0123456789abcdef" };

// Each case starts the CLI (a Node process, ~1 s on a loaded machine): a budget, not a timing.
describe("agent-sessions runner: its settings", { timeout: 60_000 }, () => {
  it("is a usage error naming the variables when the server URL and token are missing", async () => {
    const r = await runner([]);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain(
      "AGENT_SESSIONS_SERVER_URL: required: the server to dial (runner --server URL)",
    );
    expect(r.stderr).toContain("AGENT_SESSIONS_RUNNER_TOKEN: required");
  });

  it("names the flag for a bad flag and the variable for a bad variable", async () => {
    const flag = await runner(["--server", "http://127.0.0.1:1", "--label", "zone"], TOKEN);
    expect(flag).toMatchObject({ code: 2 });
    expect(flag.stderr).toContain('--label: a label must be key=value, got "zone"');
    const variable = await runner(["--server", "http://127.0.0.1:1"], {
      ...TOKEN,
      AGENT_SESSIONS_RUNNER_LABELS: "zone",
    });
    expect(variable).toMatchObject({ code: 2 });
    expect(variable.stderr).toContain('AGENT_SESSIONS_RUNNER_LABELS: a label must be key=value, got "zone"');
  });

  it("refuses plain http:// off this machine, the flag standing for AGENT_SESSIONS_SERVER_URL", async () => {
    const r = await runner(["--server", "http://10.1.2.3:8787"], TOKEN);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(
      /AGENT_SESSIONS_SERVER_URL: the server URL http:\/\/10\.1\.2\.3:8787 is not on this machine and not TLS/,
    );
  });
});
