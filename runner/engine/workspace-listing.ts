/**
 * A directory listing as both engines answer it (runner/docker/workspace-files.ts reads the entries from
 * the engine's tar stream, runner/kubernetes/workspace-files.ts from the sidecar's `find`): one shape,
 * one order, whatever the source.
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
