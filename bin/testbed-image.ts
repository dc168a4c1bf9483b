import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";

/** An image the test bed built (`state/<name>.json`), when its setting is not set. */
export function testbedImage(
  setting: string,
  name: "reference-image" | "pi-image" | "compass-image" | "hermes-image" | "base-image",
): string | undefined {
  if (process.env[setting]) return process.env[setting];
  const file = join(
    process.env.AGENT_SESSIONS_TESTBED_HOME ?? "/var/cache/agent-sessions-testbed",
    "state",
    `${name}.json`,
  );
  return existsSync(file) ? (JSON.parse(readFileSync(file, "utf8")) as { image: string }).image : undefined;
}
