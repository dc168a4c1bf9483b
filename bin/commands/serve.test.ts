import { execFile, spawnSync } from "node:child_process";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { embeddedRunnerConfig } from "./serve.ts";

const CLI = join(import.meta.dirname, "..", "cli.ts");

describe("agent-sessions serve: its embedded runner's settings", { timeout: 60_000 }, () => {
  it("exits with a usage error naming a bad runner variable, its server closed (the process ends)", async () => {
    const clean = Object.fromEntries(
      Object.entries(process.env).filter(([k]) => !k.startsWith("AGENT_SESSIONS_")),
    );
    const dataDir = mkdtempSync(join(tmpdir(), "agent-sessions-serve-cli-"));
    const r = await new Promise<{ code: number; stderr: string }>((resolve) => {
      execFile(
        process.execPath,
        [CLI, "serve", "--port", "0", "--data-dir", dataDir],
        // A server left listening would keep the process up until this timeout kills it.
        { env: { ...clean, AGENT_SESSIONS_ENGINE: "podman" }, timeout: 30_000 },
        (error, _stdout, stderr) =>
          resolve({ code: error ? Number((error as { code?: number }).code ?? 1) : 0, stderr }),
      );
    });
    expect(r.stderr).toContain("AGENT_SESSIONS_ENGINE: Invalid option");
    expect(r.code).toBe(2);
  });
});

const server = { token: "t".repeat(32), dataDir: "/tmp/serve-test", engine: "docker" as const };

describe("serve's embedded runner", () => {
  it.each([
    ["every IPv4 interface", "http://0.0.0.0:8787", "http://127.0.0.1:8787"],
    ["every IPv6 interface", "http://[::]:8787", "http://[::1]:8787"],
    ["loopback", "http://127.0.0.1:8787", "http://127.0.0.1:8787"],
  ])("reaches its own server listening on %s, with no insecure switch", async (_, listening, dialed) => {
    const config = await embeddedRunnerConfig({}, { ...server, serverUrl: listening });
    expect(config.serverUrl).toBe(dialed);
    expect(config.allowInsecure).toBe(false);
  });

  it("reaches its own server listening on one address of this machine (the address it bound)", async () => {
    const config = await embeddedRunnerConfig({}, { ...server, serverUrl: "http://10.1.2.3:8787" });
    expect(config.serverUrl).toBe("http://10.1.2.3:8787");
  });

  it("keeps a standalone runner's refusal of plain ws:// to another host", async () => {
    const { parseRunnerConfig } = await import("../../runner/config.ts");
    expect(() =>
      parseRunnerConfig({
        AGENT_SESSIONS_SERVER_URL: "http://0.0.0.0:8787",
        AGENT_SESSIONS_RUNNER_TOKEN: server.token,
        AGENT_SESSIONS_RUNNER_DATA_DIR: server.dataDir,
      }),
    ).toThrow(/not on this machine and not TLS/);
  });
});

describe("serve whose embedded runner cannot start", () => {
  it("exits non-zero naming the missing dependency (no Pulumi CLI), not a healthy-looking server", () => {
    const home = mkdtempSync(join(tmpdir(), "serve-no-pulumi-"));
    const run = spawnSync(
      process.execPath,
      [fileURLToPath(new URL("../cli.ts", import.meta.url)), "serve", "--port", "0", "--data-dir", home],
      {
        // PATH holds node alone, PULUMI_HOME a directory without the CLI.
        env: { PATH: dirname(process.execPath), PULUMI_HOME: home, HOME: home },
        encoding: "utf8",
        timeout: 20_000,
      },
    );
    expect(run.signal).toBeNull(); // it exited by itself, not killed by the timeout
    expect(run.status).not.toBe(0);
    expect(run.stderr).toMatch(/the Pulumi CLI .*not found/);
  });
});
