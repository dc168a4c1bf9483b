import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { importsIn, importsOf, type ModuleImport, modulesUnder } from "../test/support/module-imports.ts";

// The server's concepts depend one way: http → harness/relay → lifecycle → store; runners
// implement lifecycle's port (runner-directory.ts); observability (log, metrics, audit) is a leaf.
// The composition root (main.ts, compose-server.ts, config.ts, *-wiring.ts) at proxy/ may import
// any of them and none of them imports it. Server and runner never import each other.

const PROXY = dirname(fileURLToPath(import.meta.url));

/** The folders each concept may import from, besides itself, contracts/ and packages. */
const ALLOWED: Record<string, readonly string[]> = {
  http: ["harness", "relay", "lifecycle", "runners", "observability", "store", "webhooks"],
  harness: ["lifecycle", "observability", "store"],
  relay: ["harness", "lifecycle", "observability", "store"],
  webhooks: ["harness", "lifecycle", "observability", "store"],
  lifecycle: ["observability", "store"],
  runners: ["cluster", "lifecycle", "observability", "store"],
  cluster: ["lifecycle", "observability", "store"],
  observability: ["store"],
  store: [],
};

type Import = ModuleImport;

/** The concept a path (relative to the repository) belongs to: a proxy/ folder, "root", or a top-level directory. */
function conceptOf(path: string): string {
  const parts = path.split("/");
  if (parts[0] !== "proxy") return `../${parts[0]}`;
  return parts.length > 2 ? (parts[1] ?? "root") : "root";
}

/** Why an import goes the wrong way, or undefined when it is allowed. */
function violation(imp: Import): string | undefined {
  const from = conceptOf(imp.from);
  const to = conceptOf(imp.to);
  if (to === "../runner")
    return `${imp.from} imports the runner (${imp.specifier}): server and runner never import each other`;
  if (from === to || from === "root" || from === "testing" || to.startsWith("../")) return undefined;
  if (to === "root") return `${imp.from} imports the composition root (${imp.specifier})`;
  if (to === "testing") return `${imp.from} imports test support (${imp.specifier})`;
  const allowed = ALLOWED[from];
  if (!allowed) return `${imp.from} is in proxy/${from}/, a folder the boundaries do not know`;
  return allowed.includes(to)
    ? undefined
    : `${imp.from} (${from}) imports ${imp.to} (${to}): ${from} may import ${allowed.join(", ") || "nothing"} of proxy/`;
}

describe("proxy/ import boundaries", () => {
  it("every server module imports only the concepts below it", () => {
    const repo = join(PROXY, "..");
    const wrong = importsIn(
      repo,
      modulesUnder(PROXY, (name) => name.endsWith(".ts") && !name.endsWith(".test.ts")),
    )
      .map(violation)
      .filter((v): v is string => v !== undefined);
    expect(wrong).toEqual([]);
  });

  it("finds a wrong-way import: the lifecycle importing its adapter, the store importing HTTP", () => {
    const port = importsOf(
      "proxy/lifecycle/runner-directory.ts",
      'import type { CommandOutcome } from "../runners/runner-hub.ts";',
    );
    expect(port.map(violation)).toEqual([
      "proxy/lifecycle/runner-directory.ts (lifecycle) imports proxy/runners/runner-hub.ts (runners): lifecycle may import observability, store of proxy/",
    ]);
    const store = importsOf(
      "proxy/store/x.ts",
      'export { y } from "../http/app.ts";\nawait import("../main.ts");',
    );
    expect(store.map(violation)).toEqual([
      "proxy/store/x.ts (store) imports proxy/http/app.ts (http): store may import nothing of proxy/",
      "proxy/store/x.ts imports the composition root (../main.ts)",
    ]);
    expect(violation(importsOf("proxy/http/app.ts", 'import "../../runner/link.ts";')[0] ?? imp0())).toBe(
      "proxy/http/app.ts imports the runner (../../runner/link.ts): server and runner never import each other",
    );
  });

  it("allows the directions the design names", () => {
    const allowed = [
      ["proxy/http/app.ts", "../harness/harness-routes.ts"],
      ["proxy/relay/request-relay.ts", "../lifecycle/runner-directory.ts"],
      ["proxy/runners/runner-hub.ts", "../lifecycle/runner-directory.ts"],
      ["proxy/lifecycle/workspaces.ts", "../store/store.ts"],
      ["proxy/compose-server.ts", "./runners/runner-hub.ts"],
    ] as const;
    for (const [file, specifier] of allowed)
      expect(importsOf(file, `import { x } from "${specifier}";`).map(violation)).toEqual([undefined]);
  });
});

function imp0(): Import {
  throw new Error("no import parsed");
}
