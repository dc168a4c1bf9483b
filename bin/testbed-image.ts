import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";

/**
 * An image the test bed built (`state/<name>.json` under $AGENT_SESSIONS_TESTBED_HOME), if any:
 * `serve` and `runner` give it to the settings parsers as the fallback of the image settings
 * (proxy/config.ts, runner/config.ts), so a variable that is set still wins.
 */
export function testbedImage(
  name: "reference-image" | "pi-image" | "compass-image" | "hermes-image" | "base-image",
): string | undefined {
  const file = join(
    process.env.AGENT_SESSIONS_TESTBED_HOME ?? "/var/cache/agent-sessions-testbed",
    "state",
    `${name}.json`,
  );
  return existsSync(file) ? (JSON.parse(readFileSync(file, "utf8")) as { image: string }).image : undefined;
}
