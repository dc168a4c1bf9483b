/**
 * What the import-boundary tests (proxy/, runner/, runtimes/) read: the relative imports of the
 * repository's modules, by TypeScript's own scanner, so an import spelled inside a string or a
 * comment is not one.
 */
import { readdirSync, readFileSync } from "node:fs";
import { dirname, join, normalize, relative } from "node:path";
import ts from "typescript";

/** One relative import: the importing file and the imported path, both relative to the repository. */
export type ModuleImport = { from: string; to: string; specifier: string };

/** Relative imports (static, `export … from`, dynamic) of one module's source. */
export function importsOf(file: string, source: string): ModuleImport[] {
  return ts
    .preProcessFile(source, true, true)
    .importedFiles.map((f) => f.fileName)
    .filter((specifier) => specifier.startsWith("./") || specifier.startsWith("../"))
    .map((specifier) => ({ from: file, to: normalize(join(dirname(file), specifier)), specifier }));
}

/** The files under `dir` whose name `keep` accepts (node_modules left out). */
export function modulesUnder(dir: string, keep: (name: string) => boolean): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return entry.name === "node_modules" ? [] : modulesUnder(path, keep);
    return keep(entry.name) ? [path] : [];
  });
}

/** The relative imports of `files` (absolute paths), as paths relative to `repo`. */
export function importsIn(repo: string, files: string[]): ModuleImport[] {
  return files
    .map((path) => relative(repo, path))
    .flatMap((file) => importsOf(file, readFileSync(join(repo, file), "utf8")));
}
