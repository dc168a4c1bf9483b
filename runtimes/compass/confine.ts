/**
 * Where compass's file tools may reach: the session volume (`/workspace`) and the scratch tmpfs
 * (`/tmp`), nothing else. A path is resolved against the workspace, then every symlink on it is
 * followed (of the part that exists; what does not exist yet cannot be a link), and the real
 * location must lie inside an allowed root — so `../etc/passwd`, `/etc/passwd` and a link the
 * agent planted pointing at `/etc` are all refused. Plain TypeScript on node:fs, run by Bun in the
 * image and by Node in the unit tests.
 *
 * What it cannot close alone: a link swapped in between this check and the open (a race with a
 * process of the session's own); the session's only processes are the agent and its bash tool,
 * which runs as the same uid with the same reach, so the race grants nothing bash has not.
 */
import { lstatSync, realpathSync } from "node:fs";
import { basename, dirname, isAbsolute, join, resolve, sep } from "node:path";

export type Confinement = {
  /** Relative paths are taken from here. @default /workspace */
  cwd: string;
  /** Real directories a path may resolve into. @default [cwd, /tmp] */
  roots: string[];
};

export class PathOutsideWorkspace extends Error {
  override name = "PathOutsideWorkspace";
  readonly code = "PERMISSION_DENIED";
}

export function confinement(cwd = "/workspace", extraRoots: string[] = ["/tmp"]): Confinement {
  return { cwd, roots: [cwd, ...extraRoots].map(realOrSelf) };
}

/** The real absolute path `path` names, when it is inside an allowed root; throws otherwise. */
export function confinedPath(path: string, c: Confinement): string {
  if (typeof path !== "string" || path.length === 0) throw new PathOutsideWorkspace("a path is required");
  if (path.includes("\0")) throw new PathOutsideWorkspace("a path may not contain NUL");
  const absolute = resolve(c.cwd, path);
  const real = realOfExisting(absolute);
  if (!c.roots.some((root) => real === root || real.startsWith(root.endsWith(sep) ? root : root + sep)))
    throw new PathOutsideWorkspace(`${path} is outside /workspace and /tmp`);
  return real;
}

/** realpath of the longest existing prefix, with the rest (not yet created) appended. */
function realOfExisting(absolute: string): string {
  const rest: string[] = [];
  let at = absolute;
  for (;;) {
    try {
      return rest.length ? join(realpathSync(at), ...rest.reverse()) : realpathSync(at);
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      // A dangling link or a missing part: what does not exist yet cannot lead elsewhere. A loop
      // (ELOOP) or a non-directory in the middle is refused by the caller's open anyway, but
      // resolving it here would have to guess: refuse.
      if (code !== "ENOENT") throw new PathOutsideWorkspace(`${absolute} cannot be resolved (${code})`);
      const parent = dirname(at);
      if (parent === at) return absolute;
      // A dangling link passes for missing, yet writing through it creates its target (anywhere).
      if (isSymlink(at)) throw new PathOutsideWorkspace(`${absolute} goes through a dangling symbolic link`);
      rest.push(basename(at));
      at = parent;
    }
  }
}

function isSymlink(path: string): boolean {
  try {
    return lstatSync(path).isSymbolicLink();
  } catch {
    return false;
  }
}

function realOrSelf(path: string): string {
  if (!isAbsolute(path)) throw new Error(`a confinement root must be absolute: ${path}`);
  try {
    return realpathSync(path);
  } catch {
    return resolve(path);
  }
}
