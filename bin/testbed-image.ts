import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { SHIPPED_RUNTIMES, type ShippedTestbedImage } from "../runtimes/catalogue.ts";

/**
 * An image the test bed built (`state/<name>.json` under $AGENT_SESSIONS_TESTBED_HOME), if any:
 * `serve` and `runner` give it to the settings parsers as the fallback of the image settings
 * (proxy/config.ts, runner/config.ts), so a variable that is set still wins.
 */
export function testbedImage(name: ShippedTestbedImage | "base-image"): string | undefined {
  const file = join(
    process.env.AGENT_SESSIONS_TESTBED_HOME ?? "/var/cache/agent-sessions-testbed",
    "state",
    `${name}.json`,
  );
  return existsSync(file) ? (JSON.parse(readFileSync(file, "utf8")) as { image: string }).image : undefined;
}

/**
 * Each shipped runtime's image setting (runtimes/catalogue.ts) as the test bed built it, the
 * fallback `serve` gives the settings parser (a variable that is set still wins); a runtime the
 * test bed has not built is left out.
 */
export function shippedImageSettings(): Record<string, string> {
  const settings: Record<string, string> = {};
  for (const runtime of SHIPPED_RUNTIMES) {
    const image = testbedImage(runtime.testbedImage);
    if (image) settings[runtime.imageSetting] = image;
  }
  return settings;
}
