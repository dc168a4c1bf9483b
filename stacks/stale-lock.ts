/**
 * A stack left locked by a crashed process. The file backend keeps one JSON lock file a holder
 * under `.pulumi/locks/<org>/<project>/<stack>/`, naming the holder's pid and host. A lock whose
 * holder ran on this host and is gone is stale: recovering it (`pulumi cancel`) is safe. A lock of
 * a live process, or of another host, is never touched.
 */
import { readdir, readFile } from "node:fs/promises";
import { hostname } from "node:os";
import { join } from "node:path";

export type LockHolder = { pid: number; hostname: string; file: string };

export async function lockHolders(backendDir: string, project: string, stack: string): Promise<LockHolder[]> {
  const root = join(backendDir, ".pulumi", "locks");
  const holders: LockHolder[] = [];
  let orgs: string[];
  try {
    orgs = await readdir(root);
  } catch {
    return holders;
  }
  for (const org of orgs) {
    const dir = join(root, org, project, stack);
    let files: string[];
    try {
      files = await readdir(dir);
    } catch {
      continue;
    }
    for (const f of files.filter((n) => n.endsWith(".json"))) {
      try {
        const info = JSON.parse(await readFile(join(dir, f), "utf8")) as { pid?: number; hostname?: string };
        holders.push({
          pid: Number(info.pid ?? 0),
          hostname: String(info.hostname ?? ""),
          file: join(dir, f),
        });
      } catch {
        // A half-written lock file: treat as held by nobody we can check; leave it.
      }
    }
  }
  return holders;
}

/** Whether a process of this pid lives on this host (EPERM: it does, under another user). */
export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "EPERM";
  }
}

/** True when every holder is a dead process of this host (and there is at least one). */
export function allStale(holders: LockHolder[], host = hostname()): boolean {
  return holders.length > 0 && holders.every((h) => h.hostname === host && h.pid > 0 && !alive(h.pid));
}
