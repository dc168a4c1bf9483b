/**
 * Builds the installable client (`npm pack` in client/ runs it as `prepack`): the client's modules
 * and every module of `contracts/` they import (followed transitively, types included), staged
 * in a `.build` folder beside this file with their relative layout, compiled by tsc to ESM with `.d.ts` into
 * client/dist (`dist/client/index.js` is the entry). The repository keeps importing the `.ts`
 * sources as they are; only the package carries the copy, so nothing it ships imports outside it.
 */
import { execFileSync } from "node:child_process";
import { cpSync, existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join, relative, resolve } from "node:path";

const here = import.meta.dirname;
const repo = resolve(here, "..");
const stage = join(here, ".build");
const out = join(here, "dist");

/** The relative imports of a module (`from "./x.ts"`, `import("../y.ts")`), as absolute paths. */
function importsOf(file: string): string[] {
  const text = readFileSync(file, "utf8");
  const specifiers = [...text.matchAll(/(?:from|import)\s*\(?\s*"(\.{1,2}\/[^"]+)"/g)].map(
    (m) => m[1] as string,
  );
  return specifiers.map((s) => resolve(dirname(file), s));
}

const files = new Set<string>();
const todo = [join(here, "index.ts")];
while (todo.length > 0) {
  const file = todo.pop() as string;
  if (files.has(file)) continue;
  if (!existsSync(file)) throw new Error(`${relative(repo, file)} is imported but does not exist`);
  files.add(file);
  todo.push(...importsOf(file));
}

rmSync(stage, { recursive: true, force: true });
rmSync(out, { recursive: true, force: true });
for (const file of files) {
  const target = join(stage, relative(repo, file));
  mkdirSync(dirname(target), { recursive: true });
  cpSync(file, target);
}
const config = {
  compilerOptions: {
    target: "ES2023",
    module: "NodeNext",
    moduleResolution: "NodeNext",
    lib: ["ES2023", "DOM"],
    types: ["node"],
    strict: true,
    noUncheckedIndexedAccess: true,
    verbatimModuleSyntax: true,
    rewriteRelativeImportExtensions: true,
    declaration: true,
    skipLibCheck: true,
    rootDir: ".",
    outDir: out,
  },
  files: [...files].map((f) => relative(repo, f)),
};
writeFileSync(join(stage, "tsconfig.json"), JSON.stringify(config, null, 2));
const tsc = createRequire(join(repo, "package.json")).resolve("typescript/bin/tsc");
try {
  execFileSync(process.execPath, [tsc, "-p", join(stage, "tsconfig.json")], { stdio: "inherit" });
} finally {
  rmSync(stage, { recursive: true, force: true });
}
process.stdout.write(`client: ${files.size} modules built into ${relative(repo, out)}\n`);
