import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { importsIn, importsOf, type ModuleImport, modulesUnder } from "../test/support/module-imports.ts";

// A runtime (runtimes/<name>/) runs inside its session image, which holds its own folder, the
// kit (runtimes/kit/) and contracts/: so a runtime imports only those (and npm packages), never
// another runtime, the catalogue or the server. The kit imports only contracts/. The catalogue is
// data the server reads: it imports only contracts/. Outside runtimes/, code reads the catalogue
// and never a runtime's or the kit's code.

const RUNTIMES = dirname(fileURLToPath(import.meta.url));
const REPO = join(RUNTIMES, "..");
/** The product's code outside runtimes/ (tests and fixtures may start runtimes' code). */
const OUTSIDE = ["bin", "client", "contracts", "infra", "policies", "proxy", "runner", "stacks"];

type Import = ModuleImport;

/** `runtimes/<folder>` for a path in a runtimes/ folder, `runtimes/<file>` at its top, else the top-level folder. */
function placeOf(path: string): string {
  const parts = path.split("/");
  return parts[0] === "runtimes" ? `runtimes/${parts[1]}` : (parts[0] ?? "");
}

/** Why an import crosses a boundary, or undefined when it is allowed. */
function violation(imp: Import): string | undefined {
  const from = placeOf(imp.from);
  const to = placeOf(imp.to);
  if (from === to || to === "contracts") return undefined;
  if (!from.startsWith("runtimes/")) {
    if (!to.startsWith("runtimes/") || to === "runtimes/catalogue.ts") return undefined;
    return `${imp.from} imports ${imp.specifier}: outside runtimes/, only runtimes/catalogue.ts is read`;
  }
  if (from === "runtimes/kit" || from === "runtimes/catalogue.ts")
    return `${imp.from} imports ${imp.specifier}: ${from} imports only contracts/`;
  return to === "runtimes/kit"
    ? undefined
    : `${imp.from} imports ${imp.specifier}: a runtime imports only its own folder, runtimes/kit/ and contracts/`;
}

function modules(dir: string): string[] {
  return modulesUnder(dir, (name) => name.endsWith(".ts") && !name.endsWith(".test.ts"));
}

function violations(files: string[]): string[] {
  return importsIn(REPO, files)
    .map(violation)
    .filter((v): v is string => v !== undefined);
}

describe("runtimes/ import boundaries", () => {
  it("a runtime imports only its folder, the kit and contracts/; the kit and the catalogue only contracts/", () => {
    expect(violations(modules(RUNTIMES))).toEqual([]);
  });

  it("outside runtimes/, the product reads the catalogue and no runtime's code", () => {
    expect(violations(OUTSIDE.flatMap((dir) => modules(join(REPO, dir))))).toEqual([]);
  });

  it("finds a crossing: one runtime importing another, the kit importing a runtime, the server a runtime", () => {
    const source = (specifier: string) => `import { x } from "${specifier}";`;
    const found = [
      ...importsOf("runtimes/hermes/agent.ts", source("../pi/redact.ts")),
      ...importsOf("runtimes/kit/adapter-entry.ts", source("../pi/prompt-run.ts")),
      ...importsOf("runtimes/catalogue.ts", source("./kit/turn.ts")),
      ...importsOf("proxy/lifecycle/shipped-runtimes.ts", source("../../runtimes/kit/turn.ts")),
      ...importsOf("runtimes/pi/agent.ts", source("../../proxy/config.ts")),
    ].map(violation);
    expect(found).toEqual([
      "runtimes/hermes/agent.ts imports ../pi/redact.ts: a runtime imports only its own folder, runtimes/kit/ and contracts/",
      "runtimes/kit/adapter-entry.ts imports ../pi/prompt-run.ts: runtimes/kit imports only contracts/",
      "runtimes/catalogue.ts imports ./kit/turn.ts: runtimes/catalogue.ts imports only contracts/",
      "proxy/lifecycle/shipped-runtimes.ts imports ../../runtimes/kit/turn.ts: outside runtimes/, only runtimes/catalogue.ts is read",
      "runtimes/pi/agent.ts imports ../../proxy/config.ts: a runtime imports only its own folder, runtimes/kit/ and contracts/",
    ]);
    // What is allowed stays allowed.
    expect(
      [
        ...importsOf("runtimes/pi/agent.ts", source("../kit/command-loop.ts")),
        ...importsOf("runtimes/pi/agent.ts", source("./pi-agent.ts")),
        ...importsOf("runtimes/kit/turn.ts", source("../../contracts/adapter.ts")),
        ...importsOf("proxy/config.ts", source("../runtimes/catalogue.ts")),
      ].map(violation),
    ).toEqual([undefined, undefined, undefined, undefined]);
  });
});
