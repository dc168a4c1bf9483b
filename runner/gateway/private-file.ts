/**
 * A file of the runner's data directory only its owner reads (0600, in a 0700 directory), written
 * whole: to a temporary file first, then renamed over the old one, so a crash never leaves half
 * of it. The gateway keeps its routes, budgets and port this way.
 */
import { mkdirSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { dirname } from "node:path";

export function writePrivateFile(path: string, text: string): void {
  mkdirSync(dirname(path), { recursive: true, mode: 0o700 });
  const temporary = `${path}.tmp`;
  rmSync(temporary, { force: true }); // the mode applies to a file written anew only
  writeFileSync(temporary, text, { mode: 0o600 });
  renameSync(temporary, path);
}
