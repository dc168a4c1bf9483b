import { existsSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { SHIPPED_RUNTIMES, ShippedRuntime } from "./catalogue.ts";

const repo = fileURLToPath(new URL("..", import.meta.url));

describe("the catalogue of shipped runtimes", () => {
  it("holds valid rows, none sharing a name, an image setting or a test bed image", () => {
    for (const row of SHIPPED_RUNTIMES) expect(ShippedRuntime.safeParse(row).error).toBeUndefined();
    for (const key of ["name", "imageSetting", "testbedImage"] as const)
      expect(new Set(SHIPPED_RUNTIMES.map((r) => r[key])).size, key).toBe(SHIPPED_RUNTIMES.length);
  });

  it("names runtimes that have a folder with an adapter, and agent commands whose files exist (/app is the repo)", () => {
    for (const row of SHIPPED_RUNTIMES) {
      expect(existsSync(`${repo}runtimes/${row.name}/adapter-main.ts`), row.name).toBe(true);
      const script =
        "agentCommand" in row ? row.agentCommand.find((arg) => arg.startsWith("/app/")) : undefined;
      if (script) expect(existsSync(`${repo}${script.slice("/app/".length)}`), script).toBe(true);
    }
  });
});
