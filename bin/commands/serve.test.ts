import { execFile } from "node:child_process";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";

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
