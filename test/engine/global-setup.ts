/**
 * Engine tier setup: bring the real engines up through the project's own script. When that
 * fails the whole tier fails with the script's message — an engine test is never skipped.
 */
import { spawnSync } from "node:child_process";
import { applyTestbedEnv, testbedScript } from "../support/testbed.ts";

export default function setup(): void {
  const parts = (
    process.env.AGENT_SESSIONS_TESTBED_PARTS ??
    "node docker pulumi pulumi-kubernetes image base-image pi-image compass-image hermes-image kubernetes chromium git postgres"
  )
    .split(/\s+/)
    .filter(Boolean);
  const started = Date.now();
  const result = spawnSync(testbedScript, ["up", ...parts], { stdio: ["ignore", "inherit", "inherit"] });
  if (result.status !== 0) {
    throw new Error(
      `engine tier: the test bed did not come up (scripts/testbed up ${parts.join(" ")} exited ${result.status}). ` +
        "Run `scripts/testbed up` as root and read its output; `scripts/testbed status` says what is missing.",
    );
  }
  console.log(`engine tier: test bed up in ${((Date.now() - started) / 1000).toFixed(1)}s`);
  applyTestbedEnv();
}
