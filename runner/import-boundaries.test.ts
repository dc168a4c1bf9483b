import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import {
  importsIn as importsUnder,
  importsOf,
  type ModuleImport,
  modulesUnder,
} from "../test/support/module-imports.ts";

// The runner's concepts depend one way: every engine (docker/, kubernetes/) implements the driver
// interface of engine/ and never imports another engine; engine/ is the leaf the rest of the
// runner builds on (sessions/, relay/) and imports nothing else of runner/; link/ stands alone.
// The wiring files at runner/ (main.ts, runner.ts, config.ts) may import any of them and none of
// them imports the wiring. Server and runner never import each other (proxy/import-boundaries.test.ts
// checks the server's modules; this file checks every runner file and the server's tests).

const RUNNER = dirname(fileURLToPath(import.meta.url));
const REPO = join(RUNNER, "..");

/** The folders each runner concept may import from, besides itself, the rest of the repository and packages. */
const ALLOWED: Record<string, readonly string[]> = {
  engine: [],
  docker: ["engine"],
  kubernetes: ["engine"],
  sessions: ["engine"],
  relay: ["engine"],
  link: [],
};

/** The folders of one engine's driver each. */
const ENGINES: readonly string[] = ["docker", "kubernetes"];

type Import = ModuleImport;

/** A runner/ folder, "root" (the wiring at runner/), or `../<top-level directory>` outside runner/. */
function conceptOf(path: string): string {
  const parts = path.split("/");
  if (parts[0] !== "runner") return `../${parts[0]}`;
  return parts.length > 2 ? (parts[1] ?? "root") : "root";
}

/** Why an import of a runner file goes the wrong way, or undefined when it is allowed. */
function violation(imp: Import): string | undefined {
  const from = conceptOf(imp.from);
  const to = conceptOf(imp.to);
  if (to === "../proxy")
    return `${imp.from} imports the server (${imp.specifier}): server and runner never import each other`;
  if (from === to || from === "root" || to.startsWith("../")) return undefined;
  if (to === "root") return `${imp.from} imports the runner's wiring (${imp.specifier})`;
  const allowed = ALLOWED[from];
  if (!allowed) return `${imp.from} is in runner/${from}/, a folder the boundaries do not know`;
  if (allowed.includes(to)) return undefined;
  const note =
    from === "engine"
      ? " (the driver interface is the leaf)"
      : ENGINES.includes(from) && ENGINES.includes(to)
        ? "; engines never import each other"
        : "";
  return `${imp.from} (${from}) imports ${imp.to} (${to}): ${from} may import ${allowed.join(", ") || "nothing"} of runner/${note}`;
}

const modules = modulesUnder;

function importsIn(files: string[]): Import[] {
  return importsUnder(REPO, files);
}

describe("runner/ import boundaries", () => {
  it("every runner file, tests included, imports only the concepts below it and never the server", () => {
    const wrong = importsIn(modules(RUNNER, (name) => name.endsWith(".ts")))
      .map(violation)
      .filter((v): v is string => v !== undefined);
    expect(wrong).toEqual([]);
  });

  it("no test of the server imports the runner (its modules: proxy/import-boundaries.test.ts)", () => {
    const wrong = importsIn(modules(join(REPO, "proxy"), (name) => name.endsWith(".test.ts")))
      .filter((imp) => imp.to.startsWith("runner/"))
      .map((imp) => `${imp.from} imports the runner (${imp.specifier})`);
    expect(wrong).toEqual([]);
  });

  it("finds a wrong-way import: one engine importing the other, engine/ importing an engine, a runner file importing the server", () => {
    const engines = importsOf(
      "runner/kubernetes/workspace-files.ts",
      'import { tooLarge } from "../docker/workspace-files.ts";\nawait import("../main.ts");',
    );
    expect(engines.map(violation)).toEqual([
      "runner/kubernetes/workspace-files.ts (kubernetes) imports runner/docker/workspace-files.ts (docker): kubernetes may import engine of runner/; engines never import each other",
      "runner/kubernetes/workspace-files.ts imports the runner's wiring (../main.ts)",
    ]);
    const leaf = importsOf(
      "runner/engine/driver.ts",
      'export type { X } from "../sessions/agent-sessions.ts";',
    );
    expect(leaf.map(violation)).toEqual([
      "runner/engine/driver.ts (engine) imports runner/sessions/agent-sessions.ts (sessions): engine may import nothing of runner/ (the driver interface is the leaf)",
    ]);
    const server = importsOf(
      "runner/runner.ts",
      'import { RunnerHub } from "../proxy/runners/runner-hub.ts";',
    );
    expect(server.map(violation)).toEqual([
      "runner/runner.ts imports the server (../proxy/runners/runner-hub.ts): server and runner never import each other",
    ]);
  });

  it("reads imports as TypeScript does: not inside strings or comments", () => {
    const source = [
      'import type { EngineDriver } from "../engine/driver.ts";',
      "const text = 'import \"../docker/driver.ts\";';",
      '// import { x } from "../kubernetes/driver.ts";',
    ].join("\n");
    expect(importsOf("runner/sessions/x.ts", source).map((i) => i.specifier)).toEqual([
      "../engine/driver.ts",
    ]);
  });

  it("allows the directions the design names", () => {
    const allowed = [
      ["runner/docker/driver.ts", "../engine/driver.ts"],
      ["runner/kubernetes/exec.ts", "../engine/agent-exec.ts"],
      ["runner/sessions/agent-sessions.ts", "../engine/driver.ts"],
      ["runner/main.ts", "./docker/index.ts"],
      ["runner/config.ts", "./kubernetes/config.ts"],
      ["runner/docker/one-shot.ts", "../../infra/docker/provider/host-isolation.ts"],
    ] as const;
    for (const [file, specifier] of allowed)
      expect(importsOf(file, `import { x } from "${specifier}";`).map(violation)).toEqual([undefined]);
  });
});
