import { readFileSync } from "node:fs";
import { dirname, join, normalize } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";

const REPO = fileURLToPath(new URL("../..", import.meta.url));

/** Every package a module loads, following its relative imports (static, re-exports, dynamic). */
function packagesLoadedBy(entry: string): Set<string> {
  const seen = new Set<string>();
  const packages = new Set<string>();
  const visit = (file: string) => {
    if (seen.has(file)) return;
    seen.add(file);
    const source = readFileSync(join(REPO, file), "utf8");
    for (const m of source.matchAll(/(?:\bfrom|\bimport)\s*\(?\s*["']([^"']+)["']/g)) {
      const specifier = m[1] ?? "";
      if (specifier.startsWith(".")) visit(normalize(join(dirname(file), specifier)));
      else packages.add(specifier);
    }
  };
  visit(entry);
  return packages;
}

describe("the runner's one-shot path", () => {
  it("runs an AgentRun on Docker without loading @pulumi/pulumi", () => {
    const loaded = [...packagesLoadedBy("runner/docker/one-shot.ts")];
    expect(loaded.filter((p) => p.startsWith("@pulumi/"))).toEqual([]);
  });

  it("would see Pulumi through the session component (the check can fail)", () => {
    expect(packagesLoadedBy("infra/docker/session.ts").has("@pulumi/pulumi")).toBe(true);
  });
});
