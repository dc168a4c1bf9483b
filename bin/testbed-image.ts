import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { SHIPPED_RUNTIMES, type ShippedTestbedImage } from "../runtimes/catalogue.ts";

/** An image the test bed built (`state/<name>.json`), when its setting is not set. */
export function testbedImage(setting: string, name: ShippedTestbedImage | "base-image"): string | undefined {
  if (process.env[setting]) return process.env[setting];
  const file = join(
    process.env.AGENT_SESSIONS_TESTBED_HOME ?? "/var/cache/agent-sessions-testbed",
    "state",
    `${name}.json`,
  );
  return existsSync(file) ? (JSON.parse(readFileSync(file, "utf8")) as { image: string }).image : undefined;
}

/**
 * Each shipped runtime's image setting (runtimes/catalogue.ts) as the environment gives it, else
 * the image the test bed built for it; a runtime with neither is left out.
 */
export function shippedImageSettings(): Record<string, string> {
  const settings: Record<string, string> = {};
  for (const runtime of SHIPPED_RUNTIMES) {
    const image = testbedImage(runtime.imageSetting, runtime.testbedImage);
    if (image) settings[runtime.imageSetting] = image;
  }
  return settings;
}
