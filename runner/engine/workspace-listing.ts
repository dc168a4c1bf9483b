/**
 * A directory listing as both engines answer it (both from the files script's `find`:
 * runner/docker/workspace-files.ts in a git-image container, runner/kubernetes/workspace-files.ts in
 * the sidecar): one shape, one order.
 */
import type { WorkspaceEntry, WorkspaceEntryType } from "../../contracts/workspace-files.ts";

export type ListedEntry = {
  name: string;
  type: WorkspaceEntryType;
  size: number;
  /** Seconds since the epoch; a fraction is dropped (the listing is to the second). */
  mtimeSeconds: number;
  /** Kept for a symlink only. */
  linkTarget?: string | undefined;
};

/** The entries by name; a directory's size is 0, a symlink carries its target as stored. */
export function workspaceListing(listed: Iterable<ListedEntry>): WorkspaceEntry[] {
  const entries: WorkspaceEntry[] = [];
  for (const { name, type, size, mtimeSeconds, linkTarget } of listed) {
    const entry: WorkspaceEntry = {
      name,
      type,
      size: type === "dir" ? 0 : size,
      mtime: new Date(Math.floor(mtimeSeconds) * 1000).toISOString(),
    };
    if (type === "symlink") entry.link_target = linkTarget ?? "";
    entries.push(entry);
  }
  return entries.sort((a, b) => a.name.localeCompare(b.name));
}
