import { chmodSync, mkdirSync, mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it, vi } from "vitest";
import { parseRunnerConfig, startRunner } from "./main.ts";

/** A PULUMI_HOME whose `bin/pulumi` answers `version` (a fake CLI), or none at all. */
function pulumiHome(withCli: boolean): string {
  const home = mkdtempSync(join(tmpdir(), "pulumi-home-"));
  if (withCli) {
    mkdirSync(join(home, "bin"));
    writeFileSync(join(home, "bin", "pulumi"), "#!/bin/sh\necho v3.200.0\n");
    chmodSync(join(home, "bin", "pulumi"), 0o755);
  }
  return home;
}

function config(dockerHost = "unix:///nonexistent/docker.sock") {
  return parseRunnerConfig({
    AGENT_SESSIONS_SERVER_URL: "http://127.0.0.1:1",
    AGENT_SESSIONS_RUNNER_TOKEN: "t".repeat(32),
    AGENT_SESSIONS_RUNNER_DATA_DIR: mkdtempSync(join(tmpdir(), "runner-start-")),
    DOCKER_HOST: dockerHost,
  });
}

afterEach(() => {
  vi.unstubAllEnvs();
});

describe("a runner that cannot start names what it lacks and how to get it", () => {
  it("without the Pulumi CLI", async () => {
    vi.stubEnv("PULUMI_HOME", pulumiHome(false));
    const failed = await startRunner(config()).catch((error: unknown) => error);
    expect(failed).toMatchObject({ code: "FAILED_PRECONDITION" });
    expect(String((failed as Error).message)).toMatch(/the Pulumi CLI .*not found.*install/i);
    expect(String((failed as Error).message)).not.toMatch(/code: -2/);
  });

  it("without a Docker engine at DOCKER_HOST", async () => {
    vi.stubEnv("PULUMI_HOME", pulumiHome(true));
    const failed = await startRunner(config()).catch((error: unknown) => error);
    expect(failed).toMatchObject({ code: "FAILED_PRECONDITION" });
    expect(String((failed as Error).message)).toMatch(
      /cannot reach the Docker engine at unix:\/\/\/nonexistent\/docker.sock.*DOCKER_HOST/,
    );
  });
});
